package harness_test

import (
	"math"
	"testing"
	"time"

	"github.com/distlock/lock/bench/harness"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0.1, 1}} {
		if got := harness.Percentile(s, c.p); got != c.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := harness.Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if got := harness.Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("Percentile of one sample = %v, want 7", got)
	}
}

func TestMeanOfNoSamplesIsZero(t *testing.T) {
	if got := harness.Mean(nil); got != 0 {
		t.Errorf("Mean(nil) = %v", got)
	}
	if got := harness.Mean([]time.Duration{1, 2, 6}); got != 3 {
		t.Errorf("Mean(1,2,6) = %v, want 3", got)
	}
}

func TestSummariseSkipsMissingRepeats(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		in   []float64
		want harness.Spread
	}{
		{[]float64{3, 1, 2}, harness.Spread{Median: 2, Min: 1, Max: 3, N: 3}},
		{[]float64{4, 1, 3, 2}, harness.Spread{Median: 2.5, Min: 1, Max: 4, N: 4}},
		{[]float64{nan, 5, math.Inf(1)}, harness.Spread{Median: 5, Min: 5, Max: 5, N: 1}},
		{[]float64{nan}, harness.Spread{}},
		{nil, harness.Spread{}},
	} {
		if got := harness.Summarise(c.in); got != c.want {
			t.Errorf("Summarise(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestRatiosPairRepeatsAndMarkGaps(t *testing.T) {
	got := harness.Ratios([]float64{2, 3, math.NaN(), 4}, []float64{1, 0, 1, 8, 9})
	if len(got) != 4 || got[0] != 2 || !math.IsNaN(got[1]) || !math.IsNaN(got[2]) || got[3] != 0.5 {
		t.Errorf("Ratios = %v, want [2 NaN NaN 0.5]", got)
	}
}
