package fold

// Bisect is how a batch the plugin failed is folded without the update(s)
// it cannot fold (the "skip" policy of the loop, a view rebuild and a
// repair): part is split in halves, in order, down to single updates.
// apply tries one part (the plugin, then writing what it made) and returns
// the plugin's error, or a fatal error that ends Bisect at once; alone
// takes an update the plugin failed on by itself (failed: its error).
// failed is the error of a call already made with part (nil: try it).
func Bisect(part []Update, failed error, apply func([]Update) (pluginErr, err error), alone func(u Update, failed error) error) error {
	if failed == nil {
		perr, err := apply(part)
		if err != nil || perr == nil {
			return err
		}
		failed = perr
	}
	if len(part) == 1 {
		return alone(part[0], failed)
	}
	mid := len(part) / 2
	if err := Bisect(part[:mid], nil, apply, alone); err != nil {
		return err
	}
	return Bisect(part[mid:], nil, apply, alone)
}
