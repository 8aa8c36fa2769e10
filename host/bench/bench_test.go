package bench

import "testing"

// TestPairedRatio: the effects' ratios pair each round with the same
// round's baseline and take the median of those ratios, so that a round
// slowed by the machine's load on both sides weighs as any other. Mutation
// caught: the ratio of the medians (4/3 here, 2 paired), and rounds paired
// out of order.
func TestPairedRatio(t *testing.T) {
	xs, base := []float64{2, 4, 6}, []float64{1, 4, 3}
	if got := pairedRatio(xs, base); got != 2 {
		t.Fatalf("pairedRatio(%v, %v) = %v, want 2 (the median of 2, 1, 2)", xs, base, got)
	}
	if got := pairedRatio(nil, base); got != 0 {
		t.Fatalf("no rounds: %v, want 0", got)
	}
}
