package foldrun

// ReleaseEffects ends the fold's effects hold: its publisher publishes
// from its outbox's first entry, without waiting for another publisher's
// effects (effects.Publisher.Release).
func (f *Fold) ReleaseEffects() error { return f.fx.Release() }
