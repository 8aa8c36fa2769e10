// Package doccheck holds tests that keep the repository's documentation in
// line with what its scripts really run. It has no code of its own.
package doccheck
