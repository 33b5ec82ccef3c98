package harness

import (
	"fmt"
	"math"
)

// Target is a performance target an issue set for one of our drivers: a ratio
// of ours to another contestant of the same backend measured in the same
// repeat (Of set), or an absolute figure (Of empty).
type Target struct {
	Issue   string // "#4"
	Backend string
	Ours    string // label of our contestant
	Of      string // label of the contestant to divide by; "" for an absolute bound
	Metric  Metric
	Max     bool    // the bound is a maximum (≤); otherwise a minimum (≥)
	Bound   float64 // the ratio or the absolute figure
	Text    string  // the target in the issue's words
}

// Verdict is a target checked against a run.
type Verdict struct {
	Target
	Got     Spread // the ratio, or the absolute figure, over the repeats
	Met     bool
	Missing string // why there is no figure, if none
}

// Check evaluates t on the median over the repeats.
func (r *Results) Check(t Target) Verdict {
	v := Verdict{Target: t}
	ours, of := r.find(t.Backend, t.Ours), r.find(t.Backend, t.Of)
	switch {
	case ours == nil:
		v.Missing = "no contestant " + t.Backend + "/" + t.Ours + " in this run"
		return v
	case t.Of != "" && of == nil:
		v.Missing = "no contestant " + t.Backend + "/" + t.Of + " in this run"
		return v
	}
	vals := r.Get(ours, t.Metric)
	if of != nil {
		vals = Ratios(vals, r.Get(of, t.Metric))
	}
	v.Got = Summarise(vals)
	if v.Got.N == 0 {
		v.Missing = "no figure (see failures)"
		return v
	}
	if t.Max {
		v.Met = v.Got.Median <= t.Bound
	} else {
		v.Met = v.Got.Median >= t.Bound
	}
	return v
}

// Shortfall says by how much a missed target was missed, as a fraction of the
// bound: 0.05 is 5% over a maximum or under a minimum.
func (v Verdict) Shortfall() float64 {
	if v.Met || v.Got.N == 0 {
		return 0
	}
	return math.Abs(v.Got.Median-v.Bound) / math.Abs(v.Bound)
}

func (v Verdict) String() string {
	op := "≥"
	if v.Max {
		op = "≤"
	}
	what, unit := v.Metric.Title, " "+v.Metric.Unit
	if v.Of != "" {
		what, unit = what+" ours ÷ "+v.Of, "×"
	}
	head := fmt.Sprintf("%s %s: %s %s %s%s", v.Issue, v.Backend, what, op, num(v.Bound), unit)
	if v.Missing != "" {
		return head + ": not measured: " + v.Missing
	}
	state := "met"
	if !v.Met {
		state = fmt.Sprintf("MISSED by %.0f%%", 100*v.Shortfall())
	}
	return fmt.Sprintf("%s: measured %s%s: %s", head, spread(v.Got), unit, state)
}

func (r *Results) find(backend, label string) *Contestant {
	// The full label first: two contestants may share a name ("distlock" and
	// "distlock (fencing=false)"), and the name alone means the one without
	// a setting, or else the first.
	for _, c := range r.Contestants {
		if c.Backend == backend && c.Label() == label {
			return c
		}
	}
	for _, c := range r.Contestants {
		if c.Backend == backend && c.Name == label {
			return c
		}
	}
	return nil
}
