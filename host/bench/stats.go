package bench

import "slices"

// pairedRatio is the median over the rounds of xs[r] / base[r]: each
// round against the same round's baseline, so that a load that comes and
// goes on the machine weighs on both sides of a ratio.
func pairedRatio(xs, base []float64) float64 {
	var rs []float64
	for r := range min(len(xs), len(base)) {
		rs = append(rs, xs[r]/base[r])
	}
	if len(rs) == 0 {
		return 0
	}
	return Median(rs)
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// Median is the median of xs.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
