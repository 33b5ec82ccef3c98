package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The two lock shapes besides the exclusive lock (issue #19).
const (
	ReadHeavy Scenario = "read-heavy" // a read-write lock, mostly readers
	Semaphore Scenario = "semaphore"  // a counting semaphore
)

// ErrUnsupported is what a contestant returns (from Open, AcquireRW or
// AcquirePermit, wrapped or not) when the library or the driver behind it does
// not have the shape a scenario asks for: the scenario is then n/a for that
// contestant, with the error as the reason, not a failure. Our drivers gain
// shapes over time, so which of them run a shape scenario is decided here, at
// run time, not by a list.
var ErrUnsupported = errors.New("harness: shape not supported")

// RWClient is a Client of a library with read-write locks.
type RWClient interface {
	Client
	// AcquireRW waits until key is held shared (a reader) or exclusive (a
	// writer), ctx is done, or the library gives up (ErrGaveUp).
	AcquireRW(ctx context.Context, key string, shared bool) (Release, error)
}

// SemClient is a Client of a library with counting semaphores.
type SemClient interface {
	Client
	// AcquirePermit waits until one of the permits of the semaphore key is
	// held, ctx is done, or the library gives up (ErrGaveUp).
	AcquirePermit(ctx context.Context, key string, permits int) (Release, error)
}

// Shape scenario defaults, used where Config leaves a field zero.
const (
	defaultShapeGoroutines = 16
	defaultShapeClients    = 4
	defaultReadShare       = 0.9
	defaultPermits         = 4
)

// shapeConfig returns the shape settings of cfg with the defaults filled in.
func (cfg Config) shapeConfig() Config {
	if cfg.ShapeGoroutines <= 0 {
		cfg.ShapeGoroutines = defaultShapeGoroutines
	}
	if cfg.ShapeClients <= 0 {
		cfg.ShapeClients = defaultShapeClients
	}
	if cfg.ReadShare <= 0 || cfg.ReadShare >= 1 {
		cfg.ReadShare = defaultReadShare
	}
	if cfg.Permits <= 1 {
		cfg.Permits = defaultPermits
	}
	return cfg
}

// degenerateAfter is how many shared (or permit) acquisitions a trial must
// record before "never two holders together" counts as a failure: a real
// read-write lock or semaphore under this many acquisitions by 16 goroutines
// that each hold a while lets two in together, an exclusive lock in disguise
// never does.
const degenerateAfter = 100

// shapeTrial has Config.ShapeGoroutines goroutines over Config.ShapeClients
// clients take one key over and over, each holding for Config.ShapeHold: in
// the read-heavy scenario a reader (shared) with probability
// Config.ReadShare and otherwise a writer (exclusive); in the semaphore
// scenario one of Config.Permits permits. It reports operations (completed
// acquisitions) per second, the acquire wait of each class (p50, p99 and the
// worst; an Acquire still waiting when its turn ends counts with the time it
// had waited, a lower bound that keeps a starved waiter in the figures), the
// most holders seen together, and violations, counted by the goroutines
// themselves on entering: a writer beside any other holder, a reader beside a
// writer, more than Permits holders.
type shapeTrial struct {
	s       Scenario
	clients []Client
	key     string
	closeFn func()
	cfg     Config

	took       time.Duration
	ops        int
	shared     int // read-heavy: acquisitions by readers; semaphore: all
	together   int64
	violations int64
	counts     []int              // acquisitions per goroutine
	waits      [2][]time.Duration // by class: 0 reader or permit holder, 1 writer
}

func openReadHeavy(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	return openShape(ctx, cfg, c, ReadHeavy)
}

func openSemaphore(ctx context.Context, cfg Config, c *Contestant) (trial, error) {
	return openShape(ctx, cfg, c, Semaphore)
}

func openShape(ctx context.Context, cfg Config, c *Contestant, s Scenario) (trial, error) {
	cfg = cfg.shapeConfig()
	clients, closeAll, err := openClients(ctx, c, cfg.ShapeClients, 0)
	if err != nil {
		return nil, err
	}
	for _, cl := range clients {
		_, rw := cl.(RWClient)
		_, sem := cl.(SemClient)
		if (s == ReadHeavy && !rw) || (s == Semaphore && !sem) {
			closeAll()
			return nil, fmt.Errorf("%w: the adapter has no %s lock", ErrUnsupported, s)
		}
	}
	return &shapeTrial{s: s, clients: clients, key: runKey(s), closeFn: closeAll, cfg: cfg, counts: make([]int, cfg.ShapeGoroutines)}, nil
}

// acquire takes the key as a writer (exclusive) or not (shared or a permit).
func (t *shapeTrial) acquire(ctx context.Context, cl Client, writer bool) (Release, error) {
	if t.s == ReadHeavy {
		return cl.(RWClient).AcquireRW(ctx, t.key, !writer)
	}
	return cl.(SemClient).AcquirePermit(ctx, t.key, t.cfg.Permits)
}

// occupancy counts the holders inside: writers in the high 32 bits, readers
// (or permit holders) in the low ones, so that one atomic add both enters and
// sees everyone else.
type occupancy struct{ v atomic.Int64 }

const writerUnit = 1 << 32

// enter records a holder entering and returns whether that broke the shape,
// and how many readers (permit holders) are inside with it.
func (o *occupancy) enter(s Scenario, writer bool, permits int) (violation bool, readers int64) {
	if writer {
		v := o.v.Add(writerUnit)
		return v != writerUnit, v & (writerUnit - 1)
	}
	v := o.v.Add(1)
	readers = v & (writerUnit - 1)
	if s == Semaphore {
		return readers > int64(permits), readers
	}
	return v>>32 != 0, readers
}

func (o *occupancy) leave(writer bool) {
	if writer {
		o.v.Add(-writerUnit)
		return
	}
	o.v.Add(-1)
}

func (t *shapeTrial) run(ctx context.Context, d time.Duration, record bool) error {
	n := t.cfg.ShapeGoroutines
	var (
		inside     occupancy
		violations atomic.Int64
		together   atomic.Int64 // most readers (permit holders) inside at once

		mu     sync.Mutex // guards the bookkeeping below
		ops    int
		shared int
		waits  [2][]time.Duration
		counts = make([]int, n)

		wg   sync.WaitGroup
		errs = make(chan error, n)
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := t.clients[g%len(t.clients)]
			rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(g)))
			for runCtx.Err() == nil {
				writer := t.s == ReadHeavy && rng.Float64() >= t.cfg.ReadShare
				class := 0
				if writer {
					class = 1
				}
				asked := time.Now()
				release, err := t.acquire(runCtx, cl, writer)
				switch {
				case errors.Is(err, ErrGaveUp) && runCtx.Err() == nil:
					continue
				case err != nil && runCtx.Err() != nil:
					// Cut off by the end of the turn: a lower bound.
					cut := time.Since(asked)
					mu.Lock()
					waits[class] = append(waits[class], cut)
					mu.Unlock()
					return
				case err != nil:
					errs <- fmt.Errorf("acquire: %w", err)
					cancel()
					return
				}
				held := time.Now()
				bad, readers := inside.enter(t.s, writer, t.cfg.Permits)
				if bad {
					violations.Add(1)
				}
				for {
					most := together.Load()
					if readers <= most || together.CompareAndSwap(most, readers) {
						break
					}
				}
				if t.cfg.ShapeHold > 0 {
					work(t.cfg.ShapeHold) // the holder's work
				}
				mu.Lock()
				waits[class] = append(waits[class], held.Sub(asked))
				// Acquisitions that end after the turn (libraries whose
				// wait cannot be cancelled) count only as waits.
				if runCtx.Err() == nil {
					ops++
					counts[g]++
					if !writer {
						shared++
					}
				}
				mu.Unlock()
				inside.leave(writer)
				if err := release(ctx); err != nil {
					errs <- fmt.Errorf("release: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	sleepCtx(runCtx, d)
	took := time.Since(begin)
	cancel()
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return err
	}
	// Violations count even in warm-up: they must never happen.
	t.violations += violations.Load()
	t.together = max(t.together, together.Load())
	if record {
		t.took += took
		t.ops += ops
		t.shared += shared
		for g := range counts {
			t.counts[g] += counts[g]
		}
		for c := range waits {
			t.waits[c] = append(t.waits[c], waits[c]...)
		}
	}
	return nil
}

func (t *shapeTrial) report(r *Results, c *Contestant, rep int) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// The fewest acquisitions of one goroutine as a fraction of the fair
	// share: every goroutine asks alike, so a low one was starved.
	minShare, least := math.NaN(), t.counts[0]
	for _, k := range t.counts {
		least = min(least, k)
	}
	if t.ops > 0 {
		minShare = float64(least) / (float64(t.ops) / float64(len(t.counts)))
	}
	if t.s == ReadHeavy {
		r.set(c, RWMinShare, rep, minShare)
		r.set(c, RWViolations, rep, float64(t.violations))
		r.set(c, RWOps, rep, float64(t.ops)/t.took.Seconds())
		r.set(c, RWReaders, rep, float64(t.together))
		if w := t.waits[0]; len(w) > 0 {
			r.set(c, RWReadP50, rep, micros(Percentile(w, 50)))
			r.set(c, RWReadP99, rep, micros(Percentile(w, 99)))
		}
		if w := t.waits[1]; len(w) > 0 {
			r.set(c, RWWriteP50, rep, micros(Percentile(w, 50)))
			r.set(c, RWWriteP99, rep, micros(Percentile(w, 99)))
			r.set(c, RWWriteMax, rep, ms(Percentile(w, 100)))
		}
		if t.shared >= degenerateAfter && t.together < 2 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s, %s, repeat %d: readers never held the lock together in %d shared acquisitions: the shared lock behaves as an exclusive one", c.ID(), t.s, rep+1, t.shared))
		}
		return
	}
	r.set(c, SemMinShare, rep, minShare)
	r.set(c, SemViolations, rep, float64(t.violations))
	r.set(c, SemOps, rep, float64(t.ops)/t.took.Seconds())
	r.set(c, SemHolders, rep, float64(t.together))
	if w := t.waits[0]; len(w) > 0 {
		r.set(c, SemP50, rep, micros(Percentile(w, 50)))
		r.set(c, SemP99, rep, micros(Percentile(w, 99)))
		r.set(c, SemMax, rep, ms(Percentile(w, 100)))
	}
	if t.shared >= degenerateAfter && t.together < 2 {
		r.Failures = append(r.Failures, fmt.Sprintf("%s, %s, repeat %d: never two permit holders together in %d acquisitions of %d permits: the semaphore behaves as an exclusive lock", c.ID(), t.s, rep+1, t.shared, t.cfg.Permits))
	}
}

func (t *shapeTrial) close() { t.closeFn() }
