// Package effects publishes a fold's plugin effects exactly once: the
// loop commits each batch's effects to the fold's outbox in the batch's
// own commit (package fold), and a Publisher drains the outbox in order
// into a JetStream stream, in atomic batches fenced against repeats,
// deleting an entry only once the server acknowledged it or the fence
// says it landed. A fold that joins another publisher's history midway
// (a state-sync, a bootstrap, a repair behind another replica) holds its
// publisher until the fence passes where it joined. RATIONALE.md,
// "Plugin effects: an outbox in the fold's commit, a publisher after it".
//
// An effect's id, "<fold>/<revision>/<index>", travels in its
// Foldhost-Effect-Id header; the fence subject's last message records the
// last effect landed, the folded stream's creation time (the history's
// epoch) and the fold's name.
//
// The package knows a fold only through its store and the few callbacks
// of Config: it must not import package host or a fold's supervision
// (host/foldrun), nor the plugin runtime.
package effects
