// Package foldhost carries the plugin SDKs' sources, for 'foldhost plugin
// new' to copy into a skeleton plugin that builds outside this repository.
// It lives at the module root because an embed reaches only files at or
// below its package: the Go SDK needs abi/ itself.
package foldhost

import "embed"

// SDKFiles are the SDKs (abi/sdk/...), the ABI package the Go SDK imports
// (abi/*.go; its _test.go files are embedded too: readers skip them) and
// the example AssemblyScript plugin's lock file (the compiler version a
// skeleton pins).
//
//go:embed abi/*.go abi/sdk/go/*.go
//go:embed abi/sdk/c/foldhost.c abi/sdk/c/foldhost.h
//go:embed abi/sdk/rust/foldhost.rs
//go:embed abi/sdk/assemblyscript/package.json abi/sdk/assemblyscript/index.ts abi/sdk/assemblyscript/assembly
//go:embed plugins/example-router/assemblyscript/package-lock.json
var SDKFiles embed.FS
