// Package hosttest is what the host's tests share, in whichever package
// they live (the host's composition, a fold's supervision, the effects
// publisher): real NATS servers and clusters, running hosts and the waits
// on them, the example router's routes, the built plugins, HTTP calls, a
// full-disk filesystem fake. Only tests import it.
//
// Every wait takes a deadline well above the work it waits for (a shared,
// busy machine; the race detector) and fails the test with what it saw
// instead: it is a ceiling against a hang, never a measure of speed.
package hosttest
