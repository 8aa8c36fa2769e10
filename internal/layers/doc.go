// Package layers holds the test that keeps the module's imports pointing
// one way: each package has a level (the table in layers_test.go, which
// is also the map of the code), and a package imports only packages of
// lower levels. The composition sits at the top (the CLI, then the host),
// the mechanisms below it, the pure kernels at the bottom. A new package
// fails the test until it is given its level, so a change of direction is
// always a decision someone wrote down.
package layers
