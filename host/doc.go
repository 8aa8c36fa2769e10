// Package host is the foldhost process as a library: a [Host] runs folds of
// NATS JetStream KV buckets through WASM plugins into local stores, with
// their state, counters and status, head polling, plugin reload, export
// rounds on schedule or on demand, and the HTTP API's data ([Host.Handler]).
// [Bootstrap] fills an empty fold from an artifact and [ExportStopped]
// exports a fold no host runs. The foldhost command is a thin layer over
// this package (flags, a TOML config through package config, output);
// everything it runs, an embedder can run from Go:
//
//	h, err := host.New(host.Options{Folds: ..., NATS: ...})
//	if err != nil { ... }
//	if err := h.Start(ctx); err != nil { ... }
//	defer h.Close()
//	go http.ListenAndServe(addr, h.Handler())
//	err = h.Run(ctx) // until ctx ends
//
// The packages below it: fold (the store and the applied loop), natskv
// (the NATS side), wasm (plugins), artifact (export, import, stores, the
// lease), httpapi (the HTTP surface).
package host
