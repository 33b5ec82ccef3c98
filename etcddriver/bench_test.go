package etcddriver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// The benchmarks compare the driver with etcd's own concurrency.Mutex in the same
// run, against one server, and give the floor etcd sets (it fsyncs every write):
//
//	go test -run '^$' -bench . -count 8 ./etcddriver | tee bench.txt
//	benchstat -col /impl bench.txt
//
// On a shared machine the server's latency drifts by the second. The
// Interleaved benchmarks alternate the contestants in short phases within one
// benchmark, so both meet the same conditions, and report each one's figure and
// their ratio:
//
//	go test -run '^$' -bench Interleaved -benchtime 20x -count 8 ./etcddriver

var benchRun atomic.Int64

func benchKey() string { return fmt.Sprintf("bench-%d", benchRun.Add(1)) }

// turn is one acquisition and release by worker w, with a check that nobody
// else holds the lock meanwhile; it reports false after an error.
func turn(ctx context.Context, b *testing.B, acquire func(ctx context.Context, w int) (func() error, error), w int, inside *atomic.Int32) bool {
	release, err := acquire(ctx, w)
	if err != nil {
		b.Error(err)
		return false
	}
	if n := inside.Add(1); n != 1 {
		b.Errorf("%d holders at once", n)
	}
	inside.Add(-1)
	if err := release(); err != nil {
		b.Error(err)
		return false
	}
	return true
}

// contend runs b.N acquire-release rounds spread over workers goroutines and
// reports the handoff rate; a second holder fails the benchmark.
func contend(b *testing.B, workers int, acquire func(ctx context.Context, w int) (release func() error, err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		next   atomic.Int64
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if !turn(ctx, b, acquire, w, &inside) {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handoffs/s")
}

// benchClient is a plain client closed when b ends.
func benchClient(b *testing.B, url string) *clientv3.Client { return newClient(b, url) }

// 8 goroutines over 2 Lockers (two processes' worth of clients) contend for one
// key, against 8 goroutines each with its own concurrency.Mutex session, over 2
// clients.
func BenchmarkContended(b *testing.B) {
	benchContended(b, testserver.Etcd(b), func(_ *testing.B, run func()) { run() })
}

// benchContended runs BenchmarkContended's two contestants against url, each
// sub-benchmark's contention wrapped by around (which calls run once).
func benchContended(b *testing.B, url string, around func(b *testing.B, run func())) {
	const clients, perClient = 2, 4
	b.Run("impl=etcddriver", func(b *testing.B) {
		key := benchKey()
		var lockers []*lock.Locker
		for c := 0; c < clients; c++ {
			lk, _ := newLocker(b, url, lock.WithTTL(10*time.Second))
			lockers = append(lockers, lk)
		}
		around(b, func() {
			contend(b, clients*perClient, func(ctx context.Context, w int) (func() error, error) {
				l, err := lockers[w%clients].Acquire(ctx, key)
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			})
		})
	})
	b.Run("impl=mutex", func(b *testing.B) {
		name := testPrefix(b) + "/" + benchKey()
		var mutexes []*concurrency.Mutex
		for c := 0; c < clients; c++ {
			client := benchClient(b, url)
			for g := 0; g < perClient; g++ {
				s, err := concurrency.NewSession(client, concurrency.WithTTL(10))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				mutexes = append(mutexes, concurrency.NewMutex(s, name))
			}
		}
		around(b, func() {
			contend(b, clients*perClient, func(ctx context.Context, w int) (func() error, error) {
				m := mutexes[w]
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock(ctx) }, nil
			})
		})
	})
}

// One goroutine takes and gives back a free lock, against concurrency.Mutex
// Lock+Unlock on an existing session, and the floor: one Put (the least any
// handoff costs), and a Put and a Delete (the least any acquire+release costs).
func BenchmarkUncontended(b *testing.B) {
	url := testserver.Etcd(b)
	ctx := context.Background()
	b.Run("impl=etcddriver", func(b *testing.B) {
		lk, _ := newLocker(b, url, lock.WithTTL(10*time.Second))
		key := benchKey()
		_ = mustAcquire(b, lk, key).Release(ctx) // the lease is granted on first use
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l, err := lk.Acquire(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=mutex", func(b *testing.B) {
		s, err := concurrency.NewSession(benchClient(b, url), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, testPrefix(b)+"/"+benchKey())
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=floor-put", func(b *testing.B) {
		c := benchClient(b, url)
		key := testPrefix(b) + "/" + benchKey()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Put(ctx, key, "v"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=floor-put+delete", func(b *testing.B) {
		c := benchClient(b, url)
		key := testPrefix(b) + "/" + benchKey()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Put(ctx, key, "v"); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Delete(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSets is conformance.BenchmarkSets on etcd, whose driver takes free
// keys in one transaction (TryAcquireSet):
//
//	go test -run '^$' -bench BenchmarkSets -count 6 ./etcddriver
func BenchmarkSets(b *testing.B) {
	url, prefix := testserver.Etcd(b), "/distlock-bench/"+benchKey()
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) {
			return newDriver(b, url, etcddriver.WithPrefix(prefix)), nil
		},
		Options: []lock.Option{lock.WithTTL(10 * time.Second)},
	})
}

// phase runs acquire-release rounds on workers goroutines for d and returns how
// many completed.
func phase(b *testing.B, d time.Duration, workers int, acquire func(ctx context.Context, w int) (release func() error, err error)) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	start := time.Now()
	end := start.Add(d)
	var (
		count  atomic.Int64
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if !turn(ctx, b, acquire, w, &inside) {
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait() // the last rounds may end after d: they count, and so does their time
	return int(count.Load()), time.Since(start)
}

// The contended comparison with the contestants alternating every second: 8 goroutines over 2 Lockers against 8 goroutines with a
// concurrency.Mutex session each. One op is one round of both phases.
func BenchmarkContendedInterleaved(b *testing.B) {
	url := testserver.Etcd(b)
	const clients, perClient, d = 2, 4, time.Second
	key := benchKey()
	var lockers []*lock.Locker
	for c := 0; c < clients; c++ {
		lk, _ := newLocker(b, url, lock.WithTTL(10*time.Second))
		lockers = append(lockers, lk)
	}
	name := testPrefix(b) + "/" + benchKey()
	var mutexes []*concurrency.Mutex
	for c := 0; c < clients; c++ {
		client := benchClient(b, url)
		for g := 0; g < perClient; g++ {
			s, err := concurrency.NewSession(client, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			mutexes = append(mutexes, concurrency.NewMutex(s, name))
		}
	}
	var (
		ours, theirs         int
		oursTime, theirsTime time.Duration
	)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, t := phase(b, d, clients*perClient, func(ctx context.Context, w int) (func() error, error) {
			l, err := lockers[w%clients].Acquire(ctx, key)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		})
		ours, oursTime = ours+n, oursTime+t
		n, t = phase(b, d, clients*perClient, func(ctx context.Context, w int) (func() error, error) {
			m := mutexes[w]
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return m.Unlock(ctx) }, nil
		})
		theirs, theirsTime = theirs+n, theirsTime+t
	}
	b.StopTimer()
	oursRate := float64(ours) / oursTime.Seconds()
	theirsRate := float64(theirs) / theirsTime.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(oursRate, "etcddriver-handoffs/s")
	b.ReportMetric(theirsRate, "mutex-handoffs/s")
	b.ReportMetric(oursRate/theirsRate, "ratio")
}

// The uncontended comparison with the contestants alternating every
// acquisition; one op is one acquire+release of each, and of the floors.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	url := testserver.Etcd(b)
	ctx := context.Background()
	lk, _ := newLocker(b, url, lock.WithTTL(10*time.Second))
	key := benchKey()
	_ = mustAcquire(b, lk, key).Release(ctx) // the lease is granted on first use
	s, err := concurrency.NewSession(benchClient(b, url), concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, testPrefix(b)+"/"+benchKey())
	c := benchClient(b, url)
	floorKey := testPrefix(b) + "/" + benchKey()
	var put time.Duration
	// The contestants run in a new random order every iteration: a write that
	// follows another write meets the server at a different point of its
	// commit cycle, and a fixed order would hand that to one contestant.
	contestants := [3]func(){
		func() {
			l, err := lk.Acquire(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			t := time.Now()
			if _, err := c.Put(ctx, floorKey, "v"); err != nil {
				b.Fatal(err)
			}
			put += time.Since(t)
			if _, err := c.Delete(ctx, floorKey); err != nil {
				b.Fatal(err)
			}
		},
	}
	var spent [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range rand.Perm(len(contestants)) {
			t := time.Now()
			contestants[k]()
			spent[k] += time.Since(t)
		}
	}
	ours, theirs, putDelete := spent[0], spent[1], spent[2]
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(ours.Microseconds())/n, "etcddriver-µs/op")
	b.ReportMetric(float64(theirs.Microseconds())/n, "mutex-µs/op")
	b.ReportMetric(float64(put.Microseconds())/n, "floor-put-µs/op")
	b.ReportMetric(float64(putDelete.Microseconds())/n, "floor-put+delete-µs/op")
	b.ReportMetric(float64(ours)/float64(theirs), "ratio")
}

// The distinct-keys comparison: goroutines over 2 clients, each taking and
// giving back a key of its own, with the contestants alternating every
// second: Lockers (the portable layer over the driver), the same driver
// called directly (what the portable layer costs is the difference), and
// concurrency.Mutex with one session per client (as bench/contestants does:
// keys are distinct, so one session serves them all). One op is one round of
// the three phases; each reports its acquire+release rate, and the ratios.
func BenchmarkDistinctKeysInterleaved(b *testing.B) {
	for _, goroutines := range []int{16, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			benchDistinct(b, goroutines)
		})
	}
}

func benchDistinct(b *testing.B, goroutines int) {
	url := testserver.Etcd(b)
	const clients, d, ttl = 2, time.Second, 10 * time.Second
	var (
		lockers []*lock.Locker
		drivers []*etcddriver.Driver
		mutexes []*concurrency.Session
	)
	for c := 0; c < clients; c++ {
		lk, _ := newLocker(b, url, lock.WithTTL(ttl))
		lockers = append(lockers, lk)
		drivers = append(drivers, newDriver(b, url, etcddriver.WithPrefix(testPrefix(b)+"-direct")))
		s, err := concurrency.NewSession(benchClient(b, url), concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		mutexes = append(mutexes, s)
	}
	base := benchKey()
	keys := make([]string, goroutines)
	for g := range keys {
		keys[g] = fmt.Sprintf("%s-%d", base, g)
	}
	var owners atomic.Int64
	contestants := [3]func(ctx context.Context, w int) (func() error, error){
		func(ctx context.Context, w int) (func() error, error) {
			l, err := lockers[w%clients].Acquire(ctx, keys[w])
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		},
		func(ctx context.Context, w int) (func() error, error) {
			dr := drivers[w%clients]
			req := &driver.Request{Key: keys[w], Owner: strconv.FormatInt(owners.Add(1), 36), TTL: ttl, Lost: driver.LostFunc(func(error) {})}
			if _, err := dr.Acquire(ctx, req); err != nil {
				return nil, err
			}
			return func() error { return dr.Release(ctx, req) }, nil
		},
		func(ctx context.Context, w int) (func() error, error) {
			m := concurrency.NewMutex(mutexes[w%clients], testPrefix(b)+"-mutex/"+keys[w])
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return m.Unlock(ctx) }, nil
		},
	}
	var (
		ops   [3]int
		spent [3]time.Duration
	)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range rand.Perm(len(contestants)) {
			n, t := phaseDistinct(b, d, goroutines, contestants[k])
			ops[k], spent[k] = ops[k]+n, spent[k]+t
		}
	}
	b.StopTimer()
	var rate [3]float64
	for k := range rate {
		rate[k] = float64(ops[k]) / spent[k].Seconds()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rate[0], "locker-ops/s")
	b.ReportMetric(rate[1], "driver-ops/s")
	b.ReportMetric(rate[2], "mutex-ops/s")
	b.ReportMetric(rate[0]/rate[2], "locker/mutex")
	b.ReportMetric(rate[1]/rate[2], "driver/mutex")
}

// phaseDistinct runs acquire-release rounds on workers goroutines, each on its
// own key, for d, and returns how many completed.
func phaseDistinct(b *testing.B, d time.Duration, workers int, acquire func(ctx context.Context, w int) (release func() error, err error)) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	start := time.Now()
	end := start.Add(d)
	var (
		count atomic.Int64
		wg    sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				release, err := acquire(ctx, w)
				if err == nil {
					err = release()
				}
				if err != nil {
					b.Error(err)
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(count.Load()), time.Since(start)
}

// The memory a held lock costs: 2000 locks held at once, by the driver alone,
// through a Locker (with its automatic refresh), and as concurrency.Mutexes
// on one session, measured as the live heap after a collection, per lock
// (the benchmark's own request, key and release closure included). One op is
// one round of the three.
func BenchmarkHeldLockMemory(b *testing.B) {
	url := testserver.Etcd(b)
	const n, ttl = 2000, 10 * time.Second
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// holdAll takes n locks on 16 goroutines and returns a function giving them back.
	holdAll := func(take func(i int) (func(), error)) func() {
		releases := make([]func(), n)
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					r, err := take(i)
					if err != nil {
						b.Error(err)
						return
					}
					releases[i] = r
				}
			}()
		}
		wg.Wait()
		return func() {
			for _, r := range releases {
				if r != nil {
					r()
				}
			}
		}
	}
	var driverBytes, lockerBytes, mutexBytes float64
	for i := 0; i < b.N; i++ {
		d := newDriver(b, url, etcddriver.WithPrefix(testPrefix(b)+"-direct"))
		base := benchKey()
		before := heap()
		release := holdAll(func(i int) (func(), error) {
			req := &driver.Request{Key: fmt.Sprintf("%s-%d", base, i), Owner: strconv.Itoa(i), TTL: ttl, Lost: driver.LostFunc(func(error) {})}
			if _, err := d.TryAcquire(ctx, req); err != nil {
				return nil, err
			}
			return func() { _ = d.Release(ctx, req) }, nil
		})
		driverBytes += float64(heap()-before) / n
		release()

		lk, _ := newLocker(b, url, lock.WithTTL(ttl))
		before = heap()
		release = holdAll(func(i int) (func(), error) {
			l, err := lk.TryAcquire(ctx, fmt.Sprintf("%s-%d", base, i))
			if err != nil {
				return nil, err
			}
			return func() { _ = l.Release(ctx) }, nil
		})
		lockerBytes += float64(heap()-before) / n
		release()

		// concurrency.Mutex on one session (the keys are distinct), as
		// bench/contestants holds them.
		s, err := concurrency.NewSession(benchClient(b, url), concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		before = heap()
		release = holdAll(func(i int) (func(), error) {
			m := concurrency.NewMutex(s, testPrefix(b)+"-mutex/"+fmt.Sprintf("%s-%d", base, i))
			if err := m.TryLock(ctx); err != nil {
				return nil, err
			}
			return func() { _ = m.Unlock(ctx) }, nil
		})
		mutexBytes += float64(heap()-before) / n
		release()
		_ = s.Close()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(driverBytes/float64(b.N), "driver-B/lock")
	b.ReportMetric(lockerBytes/float64(b.N), "locker-B/lock")
	b.ReportMetric(mutexBytes/float64(b.N), "mutex-B/lock")
}

// The distinct-keys load of one contestant alone, for profiles of the client
// (-cpuprofile, -memprofile; the server is another process): 16 goroutines
// over 2 clients, each taking and giving back a key of its own, b.N rounds in
// all. impl=driver calls the driver directly, impl=locker goes through
// lock.Locker, impl=mutex is concurrency.Mutex with one session per client,
// as in BenchmarkDistinctKeysInterleaved. Each reports the etcd servers' CPU
// per op too (when this process started them).
func BenchmarkDistinctKeys(b *testing.B) {
	const clients, goroutines, ttl = 2, 16, 10 * time.Second
	run := func(b *testing.B, acquire func(ctx context.Context, w int) (func() error, error)) {
		ctx := context.Background()
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		server0, client0 := serverCPU(), clientCPU()
		for w := 0; w < goroutines; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					release, err := acquire(ctx, w)
					if err == nil {
						err = release()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		if server0 >= 0 {
			b.ReportMetric(float64((serverCPU()-server0).Microseconds())/float64(b.N), "server-cpu-µs/op")
		}
		if client0 >= 0 {
			b.ReportMetric(float64((clientCPU()-client0).Microseconds())/float64(b.N), "client-cpu-µs/op")
		}
	}
	url := testserver.Etcd(b)
	keys := make([]string, goroutines)
	base := benchKey()
	for g := range keys {
		keys[g] = fmt.Sprintf("%s-%d", base, g)
	}
	b.Run("impl=driver", func(b *testing.B) {
		var drivers []*etcddriver.Driver
		for c := 0; c < clients; c++ {
			drivers = append(drivers, newDriver(b, url, etcddriver.WithPrefix(testPrefix(b))))
		}
		var owners atomic.Int64
		run(b, func(ctx context.Context, w int) (func() error, error) {
			dr := drivers[w%clients]
			req := &driver.Request{Key: keys[w], Owner: strconv.FormatInt(owners.Add(1), 36), TTL: ttl, Lost: driver.LostFunc(func(error) {})}
			if _, err := dr.Acquire(ctx, req); err != nil {
				return nil, err
			}
			return func() error { return dr.Release(ctx, req) }, nil
		})
	})
	b.Run("impl=locker", func(b *testing.B) {
		var lockers []*lock.Locker
		for c := 0; c < clients; c++ {
			lk, _ := newLocker(b, url, lock.WithTTL(ttl))
			lockers = append(lockers, lk)
		}
		run(b, func(ctx context.Context, w int) (func() error, error) {
			l, err := lockers[w%clients].Acquire(ctx, keys[w])
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		})
	})
	b.Run("impl=mutex", func(b *testing.B) {
		var sessions []*concurrency.Session
		for c := 0; c < clients; c++ {
			s, err := concurrency.NewSession(benchClient(b, url), concurrency.WithTTL(int(ttl/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			sessions = append(sessions, s)
		}
		run(b, func(ctx context.Context, w int) (func() error, error) {
			m := concurrency.NewMutex(sessions[w%clients], testPrefix(b)+"/"+keys[w])
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return m.Unlock(ctx) }, nil
		})
	})
}

// serverCPU is the CPU time used so far by the etcd servers this process
// started (testserver runs them as its children), or -1 where it cannot be
// read (not Linux, or a server given in the environment).
func serverCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	total, found := time.Duration(0), false
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime are fields 14 and 15.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.HasSuffix(s[:i], "(etcd") {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 13 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
		found = true
	}
	if !found {
		return -1
	}
	return total
}

// clientCPU is the CPU time this process used so far (the clients, without
// the servers), or -1 where it cannot be read.
func clientCPU() time.Duration {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
}

// BenchmarkContendedWrites is BenchmarkContended on a private server, counting
// what each handoff costs the server (issue 42): WAL fsyncs, committed Raft
// proposals (each write request is one) and the MVCC puts and deletes, per
// handoff, and the WAL's time per fsync, for the driver and for
// concurrency.Mutex.
//
//	go test -run '^$' -bench BenchmarkContendedWrites -benchtime 2000x ./etcddriver
func BenchmarkContendedWrites(b *testing.B) {
	s := testserver.StartEtcd(b)
	counters := []struct{ name, unit string }{
		{"etcd_disk_wal_fsync_duration_seconds_count", "fsyncs/handoff"},
		{"etcd_server_proposals_committed_total", "proposals/handoff"},
		{"etcd_debugging_mvcc_put_total", "puts/handoff"},
		{"etcd_debugging_mvcc_delete_total", "deletes/handoff"},
	}
	count := func(b *testing.B, run func()) {
		before := make([]float64, len(counters))
		for i, c := range counters {
			before[i] = metric(b, s, c.name)
		}
		sum := metric(b, s, "etcd_disk_wal_fsync_duration_seconds_sum")
		run()
		after := make([]float64, len(counters))
		for i, c := range counters {
			after[i] = metric(b, s, c.name)
			b.ReportMetric((after[i]-before[i])/float64(b.N), c.unit)
		}
		// The WAL's own time per fsync: two of them a handoff bound the rate.
		sum = metric(b, s, "etcd_disk_wal_fsync_duration_seconds_sum") - sum
		b.ReportMetric(1000*sum/(after[0]-before[0]), "ms/fsync")
	}
	benchContended(b, s.URL(), count)
}
