// Package run drives a soak: clients looping acquire -> fenced
// read-modify-write -> release under a nemesis, and the check of the history.
package run

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/soak/check"
)

// Summary is a run's JSON summary.
type Summary struct {
	Backend    string            `json:"backend"`
	Seed       int64             `json:"seed"`
	Clients    int               `json:"clients"`
	Keys       int               `json:"keys"`
	Duration   string            `json:"duration"`
	TTL        string            `json:"ttl"`
	Unfenced   bool              `json:"unfenced,omitempty"`
	Ops        map[string]int    `json:"ops"`
	Faults     map[string]int    `json:"faults"`
	Violations []check.Violation `json:"violations"`
	// LossDetectionMS: for holds that reported Lost, from the end of the
	// validity last confirmed to the Lost (milliseconds; negative when Lost
	// came before the validity ended).
	LossDetectionMS map[string]float64 `json:"loss_detection_ms,omitempty"`
}

// Recorder collects operations from goroutines.
type Recorder struct {
	mu  sync.Mutex
	ops []check.Op
}

func (r *Recorder) Record(o check.Op) { r.mu.Lock(); r.ops = append(r.ops, o); r.mu.Unlock() }
func (r *Recorder) Ops() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.Op(nil), r.ops...)
}

// InProcess is a soak whose clients are goroutines, each with its own Locker
// over its own driver from NewDriver (drivers of one backend share its state,
// as memdriver's of one name do). The nemesis freezes one client's driver
// calls at a time (its traffic blackholed) past the TTL, then thaws it.
type InProcess struct {
	Name      string
	NewDriver func() (driver.Driver, error)
	Clients   int
	Keys      int
	TTL       time.Duration
	Duration  time.Duration
	Seed      int64
	Out       string
	// Forget, if set, makes the backend lose every lock at once (a server
	// restarted without its data); the nemesis uses it as one of its faults.
	Forget func()
	// FreezeServer, if set, freezes the backend (SIGSTOP) and returns the
	// function that thaws it.
	FreezeServer func() (thaw func())

	// resource, if set, is the resource instead of NewResource's (the
	// self-test's broken fences).
	resource *Resource
}

type localStore struct{ r *Resource }

func (s localStore) Read(_ context.Context, c, h int, key string, tok uint64, call, deadline int64) (int64, bool, error) {
	v, ok := s.r.Read(c, h, key, tok, call, deadline)
	return v, ok, nil
}

func (s localStore) Write(_ context.Context, c, h int, key string, tok uint64, read, call, deadline int64) (bool, error) {
	return s.r.Write(c, h, key, tok, read, call, deadline), nil
}

// Run runs the soak and checks its history.
func (p InProcess) Run(ctx context.Context) (*Summary, error) {
	res, rec := p.resource, &Recorder{}
	if res == nil {
		res = NewResource()
	}
	gates := make([]*Gate, p.Clients)
	lockers := make([]*lock.Locker, p.Clients)
	expiring := true
	for i := range lockers {
		d, err := p.NewDriver()
		if err != nil {
			return nil, err
		}
		gates[i] = NewGate(d, i, p.TTL, rec.Record)
		// Locks that cannot expire (session-bound) need the refresher.
		expiring = d.Capabilities().Expiring
		lockers[i] = lock.New(gates[i], lock.WithTTL(p.TTL), lock.WithAutoRefresh(!expiring))
	}
	rctx, cancel := context.WithTimeout(ctx, p.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i, lk := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = Client(rctx, lk, localStore{res}, ClientConfig{ID: i, Keys: p.Keys, TTL: p.TTL, Seed: p.Seed*1000 + int64(i), Record: rec.Record, Gate: gates[i]})
		}()
	}
	faults := map[string]int{}
	rng := rand.New(rand.NewSource(p.Seed))
	for rctx.Err() == nil {
		sleep(rctx, time.Duration(rng.Int63n(int64(p.TTL))))
		if rctx.Err() != nil {
			break
		}
		if p.Forget != nil && rng.Intn(2) == 0 {
			c := now()
			p.Forget()
			rec.Record(check.Op{Kind: check.Forget, Client: -1, Call: c, Return: now()})
			faults["restart-losing-locks"]++
			continue
		}
		if p.FreezeServer != nil && rng.Intn(3) == 0 {
			thaw := p.FreezeServer()
			faults["server-freeze"]++
			sleep(rctx, time.Duration(rng.Int63n(int64(2*p.TTL))))
			thaw()
			continue
		}
		g := gates[rng.Intn(len(gates))]
		g.Freeze()
		faults["client-blackhole"]++
		sleep(rctx, p.TTL+time.Duration(rng.Int63n(int64(p.TTL))))
		g.Thaw()
	}
	for _, g := range gates {
		g.Thaw()
	}
	wg.Wait()
	for _, lk := range lockers {
		_ = lk.Close()
	}
	return finish(p.Name, p.Seed, p.Clients, p.Keys, p.Duration, p.TTL, false, p.Out, append(rec.Ops(), res.Ops()...), faults)
}

func finish(name string, seed int64, clients, keys int, dur, ttl time.Duration, unfenced bool, out string, h []check.Op, faults map[string]int) (*Summary, error) {
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
	}
	vs, err := check.Check(h, check.Options{NoOverlap: true, Unfenced: unfenced, OutDir: out, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	s := &Summary{Backend: name, Seed: seed, Clients: clients, Keys: keys, Duration: dur.String(), TTL: ttl.String(), Unfenced: unfenced,
		Ops: map[string]int{}, Faults: faults, Violations: vs}
	// Loss detection: from the end of the validity a hold last had
	// confirmed (by its acquire or a refresh) to its Lost. Negative: Lost
	// came first (the driver saw the loss before the validity ran out).
	confirmed := map[[2]int][]check.Op{}
	for _, o := range h {
		s.Ops[string(o.Kind)]++
		if o.Kind == check.Acquire || o.Kind == check.Refresh {
			k := [2]int{o.Client, o.Hold}
			confirmed[k] = append(confirmed[k], o)
		}
	}
	var lat []float64
	for _, o := range h {
		if o.Kind != check.Lost {
			continue
		}
		var valid int64
		for _, c := range confirmed[[2]int{o.Client, o.Hold}] {
			if c.Key == o.Key && c.Return <= o.Call {
				valid = max(valid, c.ValidUntil)
			}
		}
		if valid != 0 {
			lat = append(lat, float64(o.Call-valid)/1e6)
		}
	}
	if len(lat) > 0 {
		sort.Float64s(lat)
		pc := func(q float64) float64 { return lat[int(q*float64(len(lat)-1))] }
		s.LossDetectionMS = map[string]float64{"min": lat[0], "p50": pc(0.5), "p90": pc(0.9), "p99": pc(0.99), "max": lat[len(lat)-1], "n": float64(len(lat))}
	}
	if out != "" {
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(filepath.Join(out, "summary.json"), append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
		hb, _ := json.Marshal(h)
		if err := os.WriteFile(filepath.Join(out, "history.json"), hb, 0o644); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Recheck checks the history a run wrote to dir again (history.json, with
// the run's summary.json for its settings) and rewrites the summary: for a
// checker that changed since, or to look at a run again.
func Recheck(dir string) (*Summary, error) {
	var old Summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "summary.json"), err)
	}
	hb, err := os.ReadFile(filepath.Join(dir, "history.json"))
	if err != nil {
		return nil, err
	}
	var h []check.Op
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "history.json"), err)
	}
	dur, _ := time.ParseDuration(old.Duration)
	ttl, _ := time.ParseDuration(old.TTL)
	return finish(old.Backend, old.Seed, old.Clients, old.Keys, dur, ttl, old.Unfenced, dir, h, old.Faults)
}
