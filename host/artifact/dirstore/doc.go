// Package dirstore is the local-directory artifact store (see [Store]).
//
// It imports the artifact core and plain files: no NATS, no fold
// supervision.
package dirstore
