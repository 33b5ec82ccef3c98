package harness

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of samples by the
// nearest-rank method: the smallest sample with at least p% of the samples at
// or below it. It returns 0 for no samples. samples is sorted in place.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(math.Ceil(p / 100 * float64(len(samples))))
	return samples[min(max(rank, 1), len(samples))-1]
}

// Mean returns the mean of samples, 0 for none.
func Mean(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return sum / time.Duration(len(samples))
}

// Spread summarises one figure over the repeats of a run.
type Spread struct {
	Median, Min, Max float64
	N                int // repeats that gave a value
}

// Summarise returns the median, minimum and maximum of the finite values;
// N is 0 when there are none.
func Summarise(values []float64) Spread {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{}
	}
	slices.Sort(v)
	mid := len(v) / 2
	med := v[mid]
	if len(v)%2 == 0 {
		med = (v[mid-1] + v[mid]) / 2
	}
	return Spread{Median: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// Ratios divides a by b repeat by repeat (the two measured in the same
// repeat), NaN where either is missing or b is 0.
func Ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		if b[i] == 0 || math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			out[i] = math.NaN()
			continue
		}
		out[i] = a[i] / b[i]
	}
	return out
}
