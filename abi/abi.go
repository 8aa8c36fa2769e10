// Package abi is the foldhost plugin ABI (see ABI.md): names, codes and the
// byte encodings host and guest exchange. It is shared by the host runtime
// and the Go guest SDK, so it uses only the standard library, does no I/O,
// and builds for GOOS=wasip1 as well as for the host. Encoders append to
// caller-owned buffers and decoders read in place, so neither side allocates
// per update.
package abi

import "errors"

// Version.
const (
	Major = 1
	// Minor 1: an ok output may carry effects (StatusOKEffects).
	// Minor 2: queries (ExportQueries, ExportQuery, ImportRange).
	// Minor 3: effects that name their update (StatusOKUpdateEffects).
	Minor = 3
	// MarkerPrefix + major is the name of the version-marker export.
	MarkerPrefix = "foldhost_abi_v"
	Marker       = "foldhost_abi_v1"
)

// Export and import names.
const (
	ExportAlloc      = "foldhost_alloc"
	ExportInfo       = "foldhost_info"
	ExportApply      = "foldhost_apply"
	ExportGC         = "foldhost_gc"
	ExportInitialize = "_initialize"
	ExportMemory     = "memory"

	ImportModule     = "foldhost"
	ImportRead       = "read"
	ImportReadResult = "read_result"
	ImportLog        = "log"
)

// Update ops (batch encoding).
const (
	OpPut    byte = 1
	OpDelete byte = 2
	OpPurge  byte = 3
)

// Mutation ops (output encoding).
const (
	MutPut    byte = 1
	MutDelete byte = 2
)

// Output status codes.
const (
	StatusOK    uint32 = 0
	StatusError uint32 = 1
	// StatusOKEffects is an ok output followed by effects (minor 1); a
	// plugin without effects sends StatusOK, as a minor-0 plugin did.
	StatusOKEffects uint32 = 2
	// StatusOKUpdateEffects is an ok output followed by effects that each
	// name the batch update they derive from (minor 3), so that their ids
	// do not depend on how updates were batched.
	StatusOKUpdateEffects uint32 = 3
)

// Read spaces.
const (
	SpaceView = 0
	SpaceRaw  = 1
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("abi: malformed record")

// Pack packs a pointer and a length into the i64 the guest returns.
func Pack(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// Unpack splits a packed pointer/length.
func Unpack(v uint64) (ptr, length uint32) { return uint32(v >> 32), uint32(v) }
