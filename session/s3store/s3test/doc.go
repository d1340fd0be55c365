// Package s3test starts a real S3-compatible server for tests: versitygw
// with its posix backend on a loopback port, storing in a temporary
// directory.
//
// versitygw is looked up on PATH and in the Go bin directory and, when
// missing, installed with "go install" at [Version]. If that fails the
// test is skipped with the reason, except in CI (CI set in the
// environment), where it fails.
package s3test
