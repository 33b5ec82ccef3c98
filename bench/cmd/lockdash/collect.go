package main

import (
	"context"
	"math"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// snapshot is one collection of the cumulative metrics.
type snapshot struct {
	bounds   []float64        // acquire duration's bucket boundaries
	buckets  []uint64         // acquire duration{outcome=acquired}, cumulative per bucket
	outcomes map[string]int64 // acquire count by outcome
	held     int64
	losses   map[string]int64 // by cause
	errors   map[string]int64 // backend errors by class
}

// sample is what one second of the run shows.
type sample struct {
	at       time.Duration
	p50, p99 float64          // acquire latency of granted acquisitions, seconds; NaN without any
	outcomes map[string]int64 // acquisitions by outcome in the second
	held     int64
	losses   map[string]int64 // in the second, by cause
	errors   map[string]int64
}

func collect(rd *sdkmetric.ManualReader) (snapshot, error) {
	var rm metricdata.ResourceMetrics
	s := snapshot{outcomes: map[string]int64{}, losses: map[string]int64{}, errors: map[string]int64{}}
	if err := rd.Collect(context.Background(), &rm); err != nil {
		return s, err
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				if m.Name != "distlock.acquire.duration" {
					continue
				}
				for _, p := range d.DataPoints {
					oc, _ := p.Attributes.Value("distlock.outcome")
					s.outcomes[oc.AsString()] += int64(p.Count)
					if oc.AsString() == "acquired" {
						s.bounds = p.Bounds
						s.buckets = p.BucketCounts
					}
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					switch m.Name {
					case "distlock.locks.held":
						s.held += p.Value
					case "distlock.lock.losses":
						c, _ := p.Attributes.Value("distlock.loss.cause")
						s.losses[c.AsString()] += p.Value
					case "distlock.backend.errors":
						c, _ := p.Attributes.Value("error.type")
						s.errors[c.AsString()] += p.Value
					}
				}
			}
		}
	}
	return s, nil
}

// since is the second from prev to s, ending at at.
func (s snapshot) since(prev snapshot, at time.Duration) sample {
	out := sample{at: at, held: s.held, outcomes: diff(s.outcomes, prev.outcomes),
		losses: diff(s.losses, prev.losses), errors: diff(s.errors, prev.errors)}
	delta := make([]uint64, len(s.buckets))
	for i := range delta {
		delta[i] = s.buckets[i]
		if i < len(prev.buckets) {
			delta[i] -= prev.buckets[i]
		}
	}
	out.p50 = quantile(0.5, s.bounds, delta)
	out.p99 = quantile(0.99, s.bounds, delta)
	return out
}

func diff(cur, prev map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range cur {
		if d := v - prev[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// quantile estimates the q-quantile from bucket counts as Prometheus'
// histogram_quantile does: linear within the bucket, the highest finite bound
// for the overflow bucket, NaN without observations.
func quantile(q float64, bounds []float64, counts []uint64) float64 {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 || len(counts) != len(bounds)+1 {
		return math.NaN()
	}
	rank := q * float64(n)
	cum := make([]float64, len(counts))
	var acc float64
	for i, c := range counts {
		acc += float64(c)
		cum[i] = acc
	}
	i := sort.SearchFloat64s(cum, rank)
	if i >= len(bounds) {
		return bounds[len(bounds)-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = bounds[i-1], cum[i-1]
	}
	return lo + (bounds[i]-lo)*(rank-below)/float64(counts[i])
}
