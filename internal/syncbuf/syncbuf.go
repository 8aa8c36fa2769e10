// Package syncbuf has a bytes.Buffer that goroutines may write while a
// test reads it (log sinks, a child process's output).
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the lines that contain substr.
func (s *Buffer) Lines(substr string) []string {
	var out []string
	for _, line := range strings.Split(s.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
