// Package lease is the fleet-wide export lease: at most one node exports an
// artifact key per TTL, coordinated over a NATS KV bucket.
//
// It imports package natskv for the bucket and nothing else of the host:
// no artifact store, no fold.
package lease
