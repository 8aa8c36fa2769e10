package host

// SetMergedRangeBudget sets the entries a merged range page asks its
// units for together, for a test; the returned func restores it.
func SetMergedRangeBudget(n int) func() {
	old := mergedRangeBudget
	mergedRangeBudget = n
	return func() { mergedRangeBudget = old }
}
