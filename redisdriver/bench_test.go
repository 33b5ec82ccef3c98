package redisdriver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto/redistest"
	"github.com/distlock/lock/internal/testserver"
)

// The benchmarks run against the shared server: set DISTLOCK_TEST_REDIS_URL to
// a server pinned to another CPU than the benchmark, for example
//
//	taskset -c 0 redis-server --port 6399 --save '' --appendonly no &
//	DISTLOCK_TEST_REDIS_URL=redis://127.0.0.1:6399/0 taskset -c 1 go test -run '^$' -bench . -count 8 ./redisdriver

// rawRelease is the standard compare-and-delete, the floor's release.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func benchClient(b *testing.B, rawURL string) *redis.Client {
	b.Helper()
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func benchDriver(b *testing.B, rawURL string, opts ...Option) *Driver {
	b.Helper()
	d, err := New(benchClient(b, rawURL), append([]Option{WithPrefix("bench-" + randomHex(4))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

// BenchmarkUncontended is one acquire and release of a free lock, by six
// contestants that take turns within every iteration (in a random order each
// time), so that a noisy neighbour slows them alike:
//
//   - floor: the raw protocol, written here: SET NX PX, then the
//     compare-and-delete script by EVALSHA; no fencing, no queue;
//   - driver: this driver's TryAcquire and Release (fencing token, and the
//     queue check of the release);
//   - lock: lock.TryAcquire and Release, the same through the portable layer
//     (validation, owner identity, the refresh schedule);
//   - lock-acquire: lock.Acquire (the blocking call, which also checks the
//     queue before taking the lock) and Release;
//   - plain, lock-plain: driver and lock with WithFencing(false).
//
// It reports each one's time per acquire+release and the ratios to the floor.
func BenchmarkUncontended(b *testing.B) {
	url := testserver.Redis(b)
	ctx := context.Background()
	c := benchClient(b, url)
	floorKey := "bench-floor-" + randomHex(4)
	if err := rawRelease.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	d := benchDriver(b, url)
	req := &driver.Request{Key: "bench", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
	lk := lock.New(benchDriver(b, url))
	defer lk.Close()
	plain := benchDriver(b, url, WithFencing(false))
	plainReq := &driver.Request{Key: "bench-plain", TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
	lkPlain := lock.New(benchDriver(b, url, WithFencing(false)))
	defer lkPlain.Close()

	contestants := [6]func(i int){
		func(i int) {
			owner := strconv.Itoa(i)
			ok, err := c.SetNX(ctx, floorKey, owner, 30*time.Second).Result()
			if err != nil || !ok {
				b.Fatalf("SET NX PX = %v, %v", ok, err)
			}
			if n, err := rawRelease.Run(ctx, c, []string{floorKey}, owner).Int(); err != nil || n != 1 {
				b.Fatalf("release = %v, %v", n, err)
			}
		},
		func(i int) {
			req.Owner = strconv.Itoa(i)
			if _, err := d.TryAcquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := d.Release(ctx, req); err != nil {
				b.Fatal(err)
			}
		},
		func(int) {
			l, err := lk.TryAcquire(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func(int) {
			l, err := lk.Acquire(ctx, "bench-acquire")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func(i int) {
			plainReq.Owner = strconv.Itoa(i)
			if _, err := plain.TryAcquire(ctx, plainReq); err != nil {
				b.Fatal(err)
			}
			if err := plain.Release(ctx, plainReq); err != nil {
				b.Fatal(err)
			}
		},
		func(int) {
			l, err := lkPlain.TryAcquire(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		},
	}
	var spent [6]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range rand.Perm(len(contestants)) {
			t := time.Now()
			contestants[k](i)
			spent[k] += time.Since(t)
		}
	}
	b.StopTimer()
	per := func(k int) float64 { return float64(spent[k].Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(0), "floor-ns")
	b.ReportMetric(per(1), "driver-ns")
	b.ReportMetric(per(2), "lock-ns")
	b.ReportMetric(per(3), "lock-acquire-ns")
	b.ReportMetric(per(1)/per(0), "driver/floor")
	b.ReportMetric(per(2)/per(0), "lock/floor")
	b.ReportMetric(per(3)/per(0), "lock-acquire/floor")
	b.ReportMetric(per(4), "plain-ns")
	b.ReportMetric(per(5), "lock-plain-ns")
	b.ReportMetric(per(4)/per(0), "plain/floor")
	b.ReportMetric(per(5)/per(0), "lock-plain/floor")
	b.ReportMetric(per(4)/per(1), "plain/driver")
}

// BenchmarkSets is conformance.BenchmarkSets on one server, where the driver
// takes free keys in one script round trip (TryAcquireSet); interleaved is
// the figure to read on a loaded machine.
func BenchmarkSets(b *testing.B) {
	u := testserver.Redis(b)
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return openURL(ctx, u) },
	})
}

// redislockObtain is the obtain script of github.com/bsm/redislock v0.9.4,
// as it sends it: BenchmarkDistinctKeys replays that library's protocol (its
// module is not a dependency of this one; bench/ runs the library itself).
var redislockObtain = redis.NewScript(`
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end

local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`)

// BenchmarkDistinctKeys is bench's distinct-keys scenario in a form that
// compares builds: 16 or 64 goroutines over 2 clients each take and give
// back a key of their own (Acquire and Release, the blocking call), in
// bursts of 8 per goroutine, by contestants that take turns within every
// iteration, in a random order each time:
//
//   - floor: SET NX PX, then the compare-and-delete script by EVALSHA;
//   - redislock: what bsm/redislock sends at its default (Obtain: its obtain
//     script by EVALSHA under a context deadline of the TTL; Release: the
//     compare-and-delete script), with a 22-byte random token as it draws;
//   - lock: lock.Locker's Acquire and Release on this driver, fencing on,
//     the Lockers opened as lock.Open opens them;
//   - driver: the driver's Acquire and Release without the portable layer;
//   - lock-try: lock.Locker's TryAcquire and Release (the uncontended
//     scenario's calls);
//   - lock-plain: lock's Acquire and Release with fencing=false.
//
// It reports each one's acquire+release operations per second and the
// ratios; and, since on a shared machine the rates move with the load, what
// they come from: the CPU time per operation of this process (client-µs) and,
// when the server runs on this machine, of the server (server-µs), which
// bounds the rate when the server's CPU is saturated (as in bench, where it
// has one). Run it as bench does, with GOMAXPROCS=1 (-cpu 1) and the server
// on another CPU (see above).
func BenchmarkDistinctKeys(b *testing.B) {
	for _, goroutines := range []int{16, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) { benchDistinctKeys(b, goroutines) })
	}
}

func benchDistinctKeys(b *testing.B, goroutines int) {
	const clients, burst = 2, 8
	const ttl = 30 * time.Second
	url := testserver.Redis(b)
	ctx := context.Background()
	prefix := "bench-" + randomHex(4)
	var (
		raw     [clients]*redis.Client
		drivers [clients]*Driver
		lockers [clients]*lock.Locker
		plain   [clients]*lock.Locker
	)
	for i := range clients {
		raw[i] = benchClient(b, url)
		if err := rawRelease.Load(ctx, raw[i]).Err(); err != nil {
			b.Fatal(err)
		}
		if err := redislockObtain.Load(ctx, raw[i]).Err(); err != nil {
			b.Fatal(err)
		}
		drivers[i] = benchDriver(b, url)
		lk, err := lock.Open(ctx, url+"?prefix="+prefix)
		if err != nil {
			b.Fatal(err)
		}
		lockers[i] = lk
		defer lk.Close()
		if plain[i], err = lock.Open(ctx, url+"?fencing=false&prefix="+prefix+"-plain"); err != nil {
			b.Fatal(err)
		}
		defer plain[i].Close()
	}
	keys := make([]string, goroutines)
	reqs := make([]*driver.Request, goroutines)
	for g := range keys {
		keys[g] = fmt.Sprintf("%s/distinct/%d", prefix, g)
		reqs[g] = &driver.Request{Key: keys[g], TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	}
	ttlMillis := strconv.FormatInt(ttl.Milliseconds(), 10)
	names := [...]string{"floor", "redislock", "lock", "driver", "lock-try", "lock-plain"}
	contestants := [len(names)]func(g, j int) error{
		func(g, j int) error {
			c, owner := raw[g%clients], randomHex(11)
			ok, err := c.SetNX(ctx, keys[g], owner, ttl).Result()
			if err != nil || !ok {
				return fmt.Errorf("SET NX PX = %v, %v", ok, err)
			}
			return rawRelease.Run(ctx, c, []string{keys[g]}, owner).Err()
		},
		func(g, j int) error {
			c, token := raw[g%clients], randomHex(11)
			octx, cancel := context.WithDeadline(ctx, time.Now().Add(ttl))
			err := redislockObtain.Run(octx, c, []string{keys[g]}, token, len(token), ttlMillis).Err()
			cancel()
			if err != nil {
				return fmt.Errorf("obtain: %w", err)
			}
			return rawRelease.Run(ctx, c, []string{keys[g]}, token).Err()
		},
		func(g, j int) error {
			l, err := lockers[g%clients].Acquire(ctx, keys[g])
			if err != nil {
				return err
			}
			return l.Release(ctx)
		},
		func(g, j int) error {
			d, req := drivers[g%clients], reqs[g]
			req.Owner = strconv.Itoa(j)
			if _, err := d.Acquire(ctx, req); err != nil {
				return err
			}
			return d.Release(ctx, req)
		},
		func(g, j int) error {
			l, err := lockers[g%clients].TryAcquire(ctx, keys[g])
			if err != nil {
				return err
			}
			return l.Release(ctx)
		},
		func(g, j int) error {
			l, err := plain[g%clients].Acquire(ctx, keys[g])
			if err != nil {
				return err
			}
			return l.Release(ctx)
		},
	}
	serverCPU := serverCPUClock(ctx, raw[0])
	var spent, clientCPU, serverSpent [len(contestants)]time.Duration
	var failed atomic.Value
	burstOf := func(k, i int) {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range burst {
					if err := contestants[k](g, i*burst+j); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range rand.Perm(len(contestants)) {
			var s0 time.Duration
			if serverCPU != nil {
				s0 = serverCPU()
			}
			c0, t := processCPU(), time.Now()
			burstOf(k, i)
			spent[k] += time.Since(t)
			clientCPU[k] += processCPU() - c0
			if serverCPU != nil {
				serverSpent[k] += serverCPU() - s0
			}
		}
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ops := float64(b.N * goroutines * burst)
	rate := func(k int) float64 { return ops / spent[k].Seconds() }
	for k, name := range names {
		b.ReportMetric(rate(k), name+"-ops/s")
		if c := clientCPU[k]; c > 0 {
			b.ReportMetric(float64(c.Nanoseconds())/1e3/ops, name+"-client-µs")
		}
		if serverCPU != nil {
			b.ReportMetric(float64(serverSpent[k].Nanoseconds())/1e3/ops, name+"-server-µs")
		}
	}
	b.ReportMetric(rate(2)/rate(0), "lock/floor")
	b.ReportMetric(rate(2)/rate(1), "lock/redislock")
	b.ReportMetric(rate(3)/rate(1), "driver/redislock")
	b.ReportMetric(rate(5)/rate(1), "lock-plain/redislock")
}

// pollingOnly hides the driver's Acquirer, so the portable layer polls
// TryAcquire with backoff as it does for backends that cannot wake waiters: the
// way polling Redis lock libraries wait.
type pollingOnly struct{ driver.Driver }

// BenchmarkContended has 8 goroutines spread over 2 Lockers (separate clients)
// take turns on one key with a tiny critical section. It reports handoffs/s
// (acquisitions by a different goroutine than the previous one, per second),
// handoff-share (the fraction of acquisitions that were handoffs: 1 when a
// releaser never takes the lock straight back) and min-share (the fewest
// acquisitions of one goroutine, as a fraction of the fair share: 1 is
// perfectly fair, below 0.5 is starvation). "queue" is this driver;
// "poll-1ms" is the same driver polled with a 1 ms retry delay, for scale.
func BenchmarkContended(b *testing.B) {
	url := testserver.Redis(b)
	for _, c := range []struct {
		name string
		wrap func(driver.Driver) driver.Driver
		opts []lock.Option
	}{
		{"queue", func(d driver.Driver) driver.Driver { return d }, nil},
		{"poll-1ms", func(d driver.Driver) driver.Driver { return pollingOnly{d} },
			[]lock.Option{lock.WithBackoff(lock.Backoff{Min: time.Millisecond, Max: time.Millisecond})}},
	} {
		b.Run(c.name, func(b *testing.B) {
			const lockers, goroutines = 2, 8
			prefix := "bench-" + randomHex(4)
			lks := make([]*lock.Locker, lockers)
			for i := range lks {
				d, err := New(benchClient(b, url), WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				lks[i] = lock.New(c.wrap(d), c.opts...)
			}
			defer func() {
				for _, lk := range lks {
					_ = lk.Close()
				}
			}()
			ctx := context.Background()
			var (
				next     atomic.Int64 // acquisitions handed out
				last     atomic.Int64 // goroutine of the previous holder
				handoffs atomic.Int64
				counts   [goroutines]int64
				wg       sync.WaitGroup
				failed   atomic.Value
			)
			last.Store(-1)
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					lk := lks[g%lockers]
					for next.Add(1) <= int64(b.N) {
						l, err := lk.Acquire(ctx, "contended")
						if err != nil {
							failed.Store(err)
							return
						}
						counts[g]++
						if last.Swap(int64(g)) != int64(g) {
							handoffs.Add(1)
						}
						if err := l.Release(ctx); err != nil {
							failed.Store(err)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			minCount := counts[0]
			for _, n := range counts {
				minCount = min(minCount, n)
			}
			b.ReportMetric(float64(handoffs.Load())/elapsed.Seconds(), "handoffs/s")
			b.ReportMetric(float64(handoffs.Load())/float64(b.N), "handoff-share")
			b.ReportMetric(float64(minCount)/(float64(b.N)/goroutines), "min-share")
		})
	}
}

// BenchmarkHeldLocks holds 10,000 locks in one Locker with automatic refresh
// (TTL 3s, so each is refreshed every second) and measures over 3 seconds, per
// second: the refresh scripts the server ran (EVALSHA calls, from INFO
// commandstats), every command it ran (those scripts' own commands included),
// and the round trips the driver made (commands and pipelines sent). It also
// reports the memory of each held lock in the process (portable layer and
// driver).
func BenchmarkHeldLocks(b *testing.B) {
	const n = 10000
	const ttl = 3 * time.Second
	const window = 3 * time.Second
	url := testserver.Redis(b)
	ctx := context.Background()
	admin := benchClient(b, url)
	for i := 0; i < b.N; i++ {
		c := benchClient(b, url)
		var trips atomic.Int64
		c.AddHook(countTrips{&trips})
		d, err := New(c, WithPrefix("bench-"+randomHex(4)))
		if err != nil {
			b.Fatal(err)
		}
		lk := lock.New(d, lock.WithTTL(ttl))
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		held := make([]*lock.Lock, 0, n)
		for k := 0; k < n; k++ {
			l, err := lk.TryAcquire(ctx, fmt.Sprintf("held/%d", k))
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, l)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLock := float64(after.HeapAlloc-before.HeapAlloc) / n

		// Measure a window of steady refreshing.
		time.Sleep(ttl / 3)
		calls0, scripts0, err := serverCalls(ctx, admin)
		if err != nil {
			b.Fatal(err)
		}
		trips0 := trips.Load()
		time.Sleep(window)
		calls1, scripts1, err := serverCalls(ctx, admin)
		if err != nil {
			b.Fatal(err)
		}
		trips1 := trips.Load()
		for _, l := range held {
			select {
			case <-l.Lost():
				b.Fatalf("lock %s lost while refreshing", l.Key())
			default:
			}
		}
		b.ReportMetric(float64(scripts1-scripts0)/window.Seconds(), "refresh-scripts/s")
		b.ReportMetric(float64(calls1-calls0)/window.Seconds(), "server-cmds/s")
		b.ReportMetric(float64(trips1-trips0)/window.Seconds(), "round-trips/s")
		b.ReportMetric(perLock, "B/held-lock")
		for _, l := range held {
			_ = l.Release(ctx)
		}
		_ = lk.Close()
	}
}

// countTrips counts the commands and pipelines a client sends, each one round
// trip.
type countTrips struct{ n *atomic.Int64 }

func (h countTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// serverCalls returns the number of commands the server has run, and of those
// the EVALSHA calls, from INFO commandstats.
var serverCalls = redistest.ServerCalls

// BenchmarkDriverHeldLockMemory measures the memory the driver itself keeps
// per held lock (its bookkeeping of 10,000 locks held at once, without the
// portable layer's share: the Requests are made before the measure).
func BenchmarkDriverHeldLockMemory(b *testing.B) {
	const n = 10000
	url := testserver.Redis(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		d := benchDriver(b, url)
		reqs := make([]*driver.Request, n+1)
		for k := range reqs {
			reqs[k] = &driver.Request{Key: fmt.Sprintf("held/%d", k), Owner: randomHex(8), TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
		}
		// The first lock starts what every lock shares: the inbox, a connection.
		if _, err := d.TryAcquire(ctx, reqs[n]); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, r := range reqs[:n] {
			if _, err := d.TryAcquire(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/held-lock")
		for _, r := range reqs {
			_ = d.Release(ctx, r)
		}
		_ = d.Close()
	}
}

// scriptTime returns the scripts the server has run (EVALSHA and EVAL calls)
// and the microseconds it spent in them, their own commands included, from
// INFO commandstats.
func scriptTime(ctx context.Context, c *redis.Client) (calls int64, usec float64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" || !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return calls, usec, nil
}

// BenchmarkShapes measures the shapes of issue 42's rows through package
// lock, each reporting the scripts the server ran per operation and its time
// in them (INFO commandstats; the server is shared, so the figures are the
// whole server's while the benchmark runs):
//
//   - shared, permit: an uncontended TryAcquire and Release of a shared hold
//     (of one permit of 4) while another reader (permit holder) holds the
//     key throughout, so the marker is in place, as under load;
//   - read-heavy, semaphore: bench/'s scenarios, 16 goroutines over 4
//     Lockers on one key, each holding 500µs: 90% readers and 10% writers, or
//     4 permits; ops/s.
func BenchmarkShapes(b *testing.B) {
	url := testserver.Redis(b)
	ctx := context.Background()
	admin := benchClient(b, url)
	measure := func(b *testing.B, run func()) {
		calls0, usec0, err := scriptTime(ctx, admin)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.ResetTimer()
		run()
		b.StopTimer()
		elapsed := time.Since(start)
		calls1, usec1, err := scriptTime(ctx, admin)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		b.ReportMetric(float64(calls1-calls0)/float64(b.N), "scripts/op")
		b.ReportMetric((usec1-usec0)/float64(b.N), "server-µs/op")
	}
	for _, s := range []struct {
		name string
		opt  lock.AcquireOption
	}{{"shared", lock.WithShared(true)}, {"permit", lock.WithPermits(4)}} {
		b.Run(s.name, func(b *testing.B) {
			lk := lock.New(benchDriver(b, url))
			defer lk.Close()
			other, err := lk.TryAcquire(ctx, "shape", s.opt)
			if err != nil {
				b.Fatal(err)
			}
			defer other.Release(ctx)
			measure(b, func() {
				for i := 0; i < b.N; i++ {
					l, err := lk.TryAcquire(ctx, "shape", s.opt)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
	for _, s := range []struct {
		name   string
		writer func(*rand.Rand) bool
		opt    lock.AcquireOption
	}{
		{"read-heavy", func(r *rand.Rand) bool { return r.Float64() >= 0.9 }, lock.WithShared(true)},
		{"semaphore", func(*rand.Rand) bool { return false }, lock.WithPermits(4)},
	} {
		b.Run(s.name, func(b *testing.B) {
			const lockers, goroutines = 4, 16
			prefix := "bench-" + randomHex(4)
			lks := make([]*lock.Locker, lockers)
			for i := range lks {
				d, err := New(benchClient(b, url), WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				lks[i] = lock.New(d)
			}
			defer func() {
				for _, lk := range lks {
					_ = lk.Close()
				}
			}()
			var (
				next   atomic.Int64
				wg     sync.WaitGroup
				failed atomic.Value
			)
			measure(b, func() {
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						r := rand.New(rand.NewPCG(rand.Uint64(), uint64(g)))
						for next.Add(1) <= int64(b.N) {
							var opts []lock.AcquireOption
							if !s.writer(r) {
								opts = append(opts, s.opt)
							}
							l, err := lks[g%lockers].Acquire(ctx, "shape", opts...)
							if err != nil {
								failed.Store(err)
								return
							}
							time.Sleep(500 * time.Microsecond)
							if err := l.Release(ctx); err != nil {
								failed.Store(err)
								return
							}
						}
					}(g)
				}
				wg.Wait()
			})
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
		})
	}
}
