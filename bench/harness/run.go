package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Config sets how long and how often each scenario runs.
type Config struct {
	Window     time.Duration // measured time per contestant, scenario and repeat
	Slices     int           // turns the window is cut into, alternating between contestants
	Warmup     time.Duration // unmeasured time before each window
	Repeats    int           // repeats of the timed scenarios
	Goroutines int           // distinct-keys scenario
	// WideGoroutines runs the distinct-keys scenario a second time at this
	// many goroutines (still over two clients); 0 skips it.
	WideGoroutines int
	Contenders     int           // contended scenario, over two clients
	HoldFor        time.Duration // contended scenario: time each holder spends inside (0: none)
	HeldLocks      int           // held-locks scenario
	HeldTTL        time.Duration // TTL of the held locks (refreshed every TTL/3)
	HeldWindow     time.Duration // held-locks measurement window
	HeldRuns       int           // repeats of the held-locks scenario

	// The scale scenario (many keys held by one client): how many locks, their
	// TTL, how long they are held, and how many of them are sampled for
	// refresh lateness (0: 100). It runs once per contestant when ScaleLocks
	// is above 0.
	ScaleLocks  int
	ScaleTTL    time.Duration
	ScaleWindow time.Duration
	ScaleProbes int

	// The shape scenarios (read-heavy, semaphore); zero fields take the
	// defaults: 16 goroutines over 4 clients, 90 % readers, 4 permits.
	ShapeGoroutines int
	ShapeClients    int
	ReadShare       float64       // read-heavy: the share of shared (read) acquisitions
	Permits         int           // semaphore: permits of the key
	ShapeHold       time.Duration // time each holder spends inside (0: none)

	// The failover scenario: repeats per contestant, how long a standby may
	// take to lead after the kill (0: 3 TTLs + 10 s), and how a leader
	// process is started (nil: every failover run fails).
	FailoverRepeats int
	FailoverTimeout time.Duration
	SpawnLeader     SpawnLeader

	// Only, when not empty, runs just these scenarios.
	Only []Scenario

	Log io.Writer // progress; nil for none
}

// runs says whether the run includes scenario s.
func (cfg Config) runs(s Scenario) bool {
	if len(cfg.Only) == 0 {
		return true
	}
	for _, o := range cfg.Only {
		if o == s {
			return true
		}
	}
	return false
}

// Results holds every figure of a run: per contestant ID and metric key, one
// value per repeat (NaN where the repeat gave none).
type Results struct {
	Config      Config
	Contestants []*Contestant
	Values      map[string]map[string][]float64
	NA          map[string]map[Scenario]string // why a scenario has no figures
	Failures    []string                       // errors that cost a contestant a figure
	Started     time.Time
	Took        time.Duration
}

// Violations returns the total of exclusion violations seen: two holders of a
// mutex, a writer beside another holder, more holders than permits.
func (r *Results) Violations() int { return r.total(violationMetrics) }

// total sums the figures of ms over every contestant and repeat.
func (r *Results) total(ms []Metric) int {
	n := 0.0
	for _, m := range r.Values {
		for _, vm := range ms {
			for _, v := range m[vm.Key] {
				if !math.IsNaN(v) {
					n += v
				}
			}
		}
	}
	return int(n)
}

// Losses returns the total of locks lost while held in the scale scenario:
// each one a failure of the run, as an exclusion violation is.
func (r *Results) Losses() int { return r.total(lossMetrics) }

// Get returns a contestant's values of m, one per repeat.
func (r *Results) Get(c *Contestant, m Metric) []float64 { return r.Values[c.ID()][m.Key] }

func (r *Results) set(c *Contestant, m Metric, rep int, v float64) {
	vals := r.Values[c.ID()]
	if vals == nil {
		vals = map[string][]float64{}
		r.Values[c.ID()] = vals
	}
	s := vals[m.Key]
	for len(s) <= rep {
		s = append(s, math.NaN())
	}
	s[rep] = v
	vals[m.Key] = s
}

func (r *Results) logf(format string, args ...any) {
	if r.Config.Log != nil {
		fmt.Fprintf(r.Config.Log, format+"\n", args...)
	}
}

// Run measures every contestant in every scenario. Within one repeat of one
// scenario the contestants of a backend take short turns in a random order
// (runGroup), so that drifting load on a shared machine meets them alike;
// ratios are then taken repeat by repeat.
func Run(ctx context.Context, cfg Config, contestants []*Contestant) *Results {
	r := &Results{
		Config: cfg, Contestants: contestants, Started: time.Now(),
		Values: map[string]map[string][]float64{}, NA: map[string]map[Scenario]string{},
	}
	for _, c := range contestants {
		r.NA[c.ID()] = c.NA
	}
	timed := []struct {
		s    Scenario
		open newTrial
		wide bool // the distinct-keys scenario at WideGoroutines
	}{{Uncontended, openUncontended, false}, {Distinct, openDistinct, false}, {Distinct, openDistinctWide, true},
		{Contended, openContended, false}, {ReadHeavy, openReadHeavy, false}, {Semaphore, openSemaphore, false}}
	for rep := 0; rep < cfg.Repeats; rep++ {
		for _, t := range timed {
			if !cfg.runs(t.s) || (t.wide && cfg.WideGoroutines <= 0) {
				continue
			}
			for _, group := range groups(contestants) {
				r.runGroup(ctx, t.s, t.open, group, rep)
			}
		}
	}
	for rep := 0; rep < cfg.HeldRuns && cfg.runs(Held); rep++ {
		for _, c := range contestants {
			r.one(ctx, Held, c, rep, runHeld)
		}
	}
	if cfg.ScaleLocks > 0 && cfg.runs(Scale) {
		for _, c := range contestants {
			if scaleNA(c) == "" {
				r.one(ctx, Scale, c, 0, runScale)
			}
		}
	}
	for rep := 0; rep < cfg.FailoverRepeats && cfg.runs(Failover); rep++ {
		for _, c := range contestants {
			if c.Elector != nil {
				r.one(ctx, Failover, c, rep, runFailover)
			}
		}
	}
	r.Took = time.Since(r.Started)
	return r
}

func (r *Results) one(ctx context.Context, s Scenario, c *Contestant, rep int, run func(context.Context, *Results, *Contestant, int) error) {
	if _, na := c.NA[s]; na || ctx.Err() != nil {
		return
	}
	begin := time.Now()
	err := run(ctx, r, c, rep)
	r.note(s, c, rep, time.Since(begin), err)
}

// markNA makes scenario s n/a for c because of err (ErrUnsupported found at
// run time). The contestant's map is copied, not changed: contestants may share
// one.
func (r *Results) markNA(s Scenario, c *Contestant, err error) {
	na := make(map[Scenario]string, len(c.NA)+1)
	for k, v := range c.NA {
		na[k] = v
	}
	na[s] = unsupportedReason(err)
	c.NA = na
	r.NA[c.ID()] = na
	r.logf("%-11s %-50s n/a: %s", s, c.ID(), na[s])
}

// unsupportedReason is err's text without the harness's own prefix.
func unsupportedReason(err error) string {
	msg := err.Error()
	for _, p := range []string{ErrUnsupported.Error() + ": ", "acquire: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	// Every goroutine of a trial reports the same refusal: keep one.
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// note records the outcome of one contestant's run of a scenario.
func (r *Results) note(s Scenario, c *Contestant, rep int, took time.Duration, err error) {
	if err != nil {
		r.Failures = append(r.Failures, fmt.Sprintf("%s, %s, repeat %d: %v", c.ID(), s, rep+1, err))
	}
	r.logf("%-11s repeat %d  %-50s %6.1fs %v", s, rep+1, c.ID(), took.Seconds(), errOrOK(err))
}

func errOrOK(err error) any {
	if err != nil {
		return err
	}
	return "ok"
}

// groups splits contestants by backend, keeping their order.
func groups(cs []*Contestant) [][]*Contestant {
	var out [][]*Contestant
	index := map[string]int{}
	for _, c := range cs {
		i, ok := index[c.Backend]
		if !ok {
			i = len(out)
			index[c.Backend] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], c)
	}
	return out
}

// Groups returns the contestants by backend, in their order.
func (r *Results) Groups() [][]*Contestant { return groups(r.Contestants) }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// runKey is a key no earlier run used, so that leftovers cannot interfere.
func runKey(s Scenario) string { return fmt.Sprintf("bench-%s-%08x", s, rand.Uint32()) }

// openClients opens n independent clients of c.
func openClients(ctx context.Context, c *Contestant, n int, ttl time.Duration) ([]Client, func(), error) {
	var clients []Client
	closeAll := func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}
	for range n {
		cl, err := c.Open(ctx, ttl)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		clients = append(clients, cl)
	}
	return clients, closeAll, nil
}
