// Package s3test runs a real S3 server for tests: versitygw on a posix
// temp directory, started per test and killed at its cleanup. A missing
// binary fails the test loudly: S3 tests are never skipped.
//
// Test support only: no production package imports it.
package s3test
