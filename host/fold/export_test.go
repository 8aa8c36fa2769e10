package fold

// Internals of the package's tests that its external tests (package
// fold_test: the ones that need NATS, whose package imports fold) use too.

// CursorTarget is cursorTarget.
type CursorTarget = cursorTarget

// OpenTemp is openTemp.
var OpenTemp = openTemp
