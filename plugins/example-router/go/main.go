//go:build wasip1

// Command example-router is the Go build of the example plugin:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o router-go.wasm ./plugins/example-router/go
package main

import (
	foldhost "github.com/foldhost/foldhost/abi/sdk/go"
	"github.com/foldhost/foldhost/plugins/example-router/go/router"
)

func init() {
	foldhost.Register[router.Record](&router.Router{})
	foldhost.RegisterQueries(router.Queries...)
}

func main() {}
