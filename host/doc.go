// Package host is the foldhost process as a library: a [Host] runs folds of
// NATS JetStream KV buckets through WASM plugins into local stores, with
// their state, counters and status, head polling, plugin reload, export
// rounds on schedule or on demand, and the HTTP API's data ([Host.Handler]).
// [Bootstrap] fills an empty fold from an artifact, [ExportStopped] exports
// a fold no host runs, [RepairStopped] and [ResetStopped] repair or refold
// one. The foldhost command is a thin layer over this package (flags, a TOML
// config through package config, output); everything it runs, an embedder
// can run from Go:
//
//	h, err := host.New(host.Options{Folds: ..., NATS: ...})
//	if err != nil { ... }
//	if err := h.Start(ctx); err != nil { ... }
//	defer h.Close()
//	go http.ListenAndServe(addr, h.Handler())
//	err = h.Run(ctx) // until ctx ends
//
// This package is the composition: it owns the Options, the start and stop
// of everything, the NATS connection (or the embedded server), the admin
// service and reads over NATS, and the offline commands. Each mechanism is
// a package of its own below it, and imports go down only
// (internal/layers' test keeps them so):
//
//	host/foldrun      one fold's supervision: its run, lifecycle, rebuilds,
//	                  repair runs, dead letters, queries, plugin reloads,
//	                  export rounds, status
//	host/effects      the effects publisher, its fence and holds
//	host/repair       cursor-expiry repairs (key listing, restore)
//	host/artifact     artifacts: export, verify, import; dirstore, s3store,
//	                  the lease, export rounds (round)
//	host/httpapi      the HTTP surface and the status types
//	host/datadir      the files beside a fold's data dir, the reset's swap
//	host/natskv       the NATS side: connection, bucket, guarded watch
//	host/wasm         the plugin runtime (wazero)
//	host/pluginobj    plugin modules in a NATS object store
//	host/fold         the store and the applied loop (no NATS, no wasm)
//	protocol, abi     the pure kernels and the plugin ABI (stdlib only)
//
// The fleet (folds placed over nodes, one owner per unit, routed reads)
// has its place between host/foldrun and this package: it decides which
// folds a node runs and composes them; the host composes it.
package host
