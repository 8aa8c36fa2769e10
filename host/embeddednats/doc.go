// Package embeddednats runs a nats-server with JetStream inside the foldhost
// process: the default when no NATS URL is configured, and the real server
// every test in this repository talks to (no mocks of NATS).
//
// It imports nothing of foldhost: the host and the tests start it, and
// connect to it like any server.
package embeddednats
