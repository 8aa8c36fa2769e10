//go:build wasip1

// Command probe is the Go SDK probe (./probe) as a module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o probe-go.wasm ./plugins/testdata/go
package main

import (
	foldhost "github.com/foldhost/foldhost/abi/sdk/go"
	"github.com/foldhost/foldhost/plugins/testdata/go/probe"
)

func init() { foldhost.Register[probe.Rec](&probe.Probe{}) }

func main() {}
