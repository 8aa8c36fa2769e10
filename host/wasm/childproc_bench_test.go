package wasm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkChildProcessRoundTrip measures the floor of the design that was
// not chosen for guest containment (RATIONALE.md, "Guest containment"):
// guests in a child process, fed over pipes. Per batch it moves what the
// router's batch of 1000 updates moves, with no guest work at all: the
// batch (~100 KB) to the child, one batched read request back (1000 keys)
// and its response (~60 KB) to the child, the output (~40 KB) back; and a
// tenth of that for a batch of 100. Its ns/op is the cost such a design
// adds to every batch, to set against the apply time of BenchmarkApply.
func BenchmarkChildProcessRoundTrip(b *testing.B) {
	if os.Getenv(echoChildEnv) != "" {
		echoChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkChildProcessRoundTrip$")
	cmd.Env = append(os.Environ(), echoChildEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	w, r := bufio.NewWriterSize(in, 1<<20), bufio.NewReaderSize(out, 1<<20)
	for _, updates := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", updates), func(b *testing.B) {
			batch, resp := make([]byte, 100*updates), make([]byte, 60*updates)
			var buf []byte
			b.ResetTimer()
			for range b.N {
				writeFrame(w, batch)       // the batch
				buf = readFrame(b, r, buf) // the read request
				writeFrame(w, resp)        // its response
				buf = readFrame(b, r, buf) // the output
			}
		})
	}
}

const echoChildEnv = "FOLDHOST_WASM_ECHO_CHILD"

// echoChild answers each batch with a read request, and each read response
// with an output, as a guest process would.
func echoChild() {
	r, w := bufio.NewReaderSize(os.Stdin, 1<<20), bufio.NewWriterSize(os.Stdout, 1<<20)
	var buf []byte
	for {
		var err error
		if buf, err = readFrameErr(r, buf); err != nil {
			return
		}
		updates := len(buf) / 100
		req, output := make([]byte, 12*updates), make([]byte, 40*updates)
		writeFrame(w, req)
		if buf, err = readFrameErr(r, buf); err != nil {
			return
		}
		writeFrame(w, output)
	}
}

func writeFrame(w *bufio.Writer, p []byte) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(p)))
	w.Write(n[:])
	w.Write(p)
	w.Flush()
}

func readFrameErr(r *bufio.Reader, buf []byte) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return buf, err
	}
	size := int(binary.LittleEndian.Uint32(n[:]))
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	_, err := io.ReadFull(r, buf[:size])
	return buf[:size], err
}

func readFrame(b *testing.B, r *bufio.Reader, buf []byte) []byte {
	buf, err := readFrameErr(r, buf)
	if err != nil {
		b.Fatal(err)
	}
	return buf
}
