package harness

import (
	"encoding/json"
	"io"
	"math"
	"time"
)

// saved is a run as results.json keeps it, so that the report and chart can be
// written again (lockbench -render) without measuring again.
type saved struct {
	Machine     Machine
	Config      savedConfig
	Started     time.Time
	Took        time.Duration
	Contestants []savedContestant
	Values      map[string]map[string][]*float64 // null where a repeat gave no figure
	Failures    []string
}

type savedConfig struct {
	Window, Warmup, HeldTTL, HeldWindow                          time.Duration
	Slices, Repeats, Goroutines, Contenders, HeldLocks, HeldRuns int
	ShapeGoroutines, ShapeClients, Permits                       int           `json:",omitempty"`
	ReadShare                                                    float64       `json:",omitempty"`
	ShapeHold                                                    time.Duration `json:",omitempty"`
	Only                                                         []Scenario    `json:",omitempty"`
	FailoverRepeats                                              int           `json:",omitempty"`
	WideGoroutines, ScaleLocks, ScaleProbes                      int           `json:",omitempty"`
	ScaleTTL, ScaleWindow                                        time.Duration `json:",omitempty"`
}

type savedContestant struct {
	Backend, Name, Setting string
	Role                   Role
	NA                     map[Scenario]string
	TryUncontended         bool
	Refreshes              bool
	NoLateness             string `json:",omitempty"`
}

// Save writes the run and the machine it ran on as JSON.
func (r *Results) Save(w io.Writer, m Machine) error {
	c := r.Config
	s := saved{
		Machine: m, Started: r.Started, Took: r.Took, Failures: r.Failures,
		Config: savedConfig{c.Window, c.Warmup, c.HeldTTL, c.HeldWindow, c.Slices, c.Repeats, c.Goroutines, c.Contenders, c.HeldLocks, c.HeldRuns,
			c.ShapeGoroutines, c.ShapeClients, c.Permits, c.ReadShare, c.ShapeHold, c.Only, c.FailoverRepeats,
			c.WideGoroutines, c.ScaleLocks, c.ScaleProbes, c.ScaleTTL, c.ScaleWindow},
		Values: map[string]map[string][]*float64{},
	}
	for _, c := range r.Contestants {
		s.Contestants = append(s.Contestants, savedContestant{c.Backend, c.Name, c.Setting, c.Role, c.NA, c.TryUncontended, c.Refreshes, c.NoLateness})
	}
	for id, metrics := range r.Values {
		s.Values[id] = map[string][]*float64{}
		for key, vals := range metrics {
			out := make([]*float64, len(vals))
			for i, v := range vals {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					out[i] = &v
				}
			}
			s.Values[id][key] = out
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(s)
}

// Load reads a run that Save wrote. Its contestants cannot be run again (they
// have no Open), only reported.
func Load(rd io.Reader) (*Results, Machine, error) {
	var s saved
	if err := json.NewDecoder(rd).Decode(&s); err != nil {
		return nil, Machine{}, err
	}
	c := s.Config
	r := &Results{
		Config: Config{Window: c.Window, Warmup: c.Warmup, HeldTTL: c.HeldTTL, HeldWindow: c.HeldWindow,
			Slices: c.Slices, Repeats: c.Repeats, Goroutines: c.Goroutines, Contenders: c.Contenders,
			HeldLocks: c.HeldLocks, HeldRuns: c.HeldRuns,
			ShapeGoroutines: c.ShapeGoroutines, ShapeClients: c.ShapeClients, Permits: c.Permits, ReadShare: c.ReadShare, ShapeHold: c.ShapeHold, Only: c.Only, FailoverRepeats: c.FailoverRepeats,
			WideGoroutines: c.WideGoroutines, ScaleLocks: c.ScaleLocks, ScaleProbes: c.ScaleProbes, ScaleTTL: c.ScaleTTL, ScaleWindow: c.ScaleWindow},
		Started: s.Started, Took: s.Took, Failures: s.Failures,
		Values: map[string]map[string][]float64{}, NA: map[string]map[Scenario]string{},
	}
	for _, sc := range s.Contestants {
		con := &Contestant{Backend: sc.Backend, Name: sc.Name, Setting: sc.Setting, Role: sc.Role,
			NA: sc.NA, TryUncontended: sc.TryUncontended, Refreshes: sc.Refreshes, NoLateness: sc.NoLateness}
		r.Contestants = append(r.Contestants, con)
		r.NA[con.ID()] = con.NA
	}
	for id, metrics := range s.Values {
		r.Values[id] = map[string][]float64{}
		for key, vals := range metrics {
			out := make([]float64, len(vals))
			for i, v := range vals {
				out[i] = math.NaN()
				if v != nil {
					out[i] = *v
				}
			}
			r.Values[id][key] = out
		}
	}
	return r, s.Machine, nil
}
