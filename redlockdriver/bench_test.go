package redlockdriver

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
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
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/redisdriver"
)

// The benchmarks run on three private servers, or on the servers listed
// (space-separated redis URLs) in DISTLOCK_TEST_REDLOCK_URLS: start them pinned
// to another CPU than the benchmark, for example
//
//	for p in 6401 6402 6403; do taskset -c 0 redis-server --port $p --save '' --appendonly no & done
//	DISTLOCK_TEST_REDLOCK_URLS="redis://127.0.0.1:6401/0 redis://127.0.0.1:6402/0 redis://127.0.0.1:6403/0" \
//	  taskset -c 1 go test -run '^$' -bench . -count 6 ./redlockdriver
func benchServers(b *testing.B) []string {
	if env := os.Getenv("DISTLOCK_TEST_REDLOCK_URLS"); env != "" {
		return strings.Fields(env)
	}
	servers := testserver.RedisServers(b, 3)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return urls
}

func benchPrefix() string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

// benchRedlock is a Locker over the servers.
func benchRedlock(b *testing.B, urls []string, prefix string) *lock.Locker {
	b.Helper()
	q := make([]string, len(urls))
	for i, u := range urls {
		q[i] = "server=" + u
	}
	lk, err := lock.Open(context.Background(), "redlock://?"+strings.Join(q, "&")+"&prefix="+prefix)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lk.Close() })
	return lk
}

// benchRedis is a Locker of the single-server Redis driver on url.
func benchRedis(b *testing.B, url, prefix string) *lock.Locker {
	b.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	b.Cleanup(func() { _ = c.Close() })
	d, err := redisdriver.New(c, redisdriver.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	lk := lock.New(d)
	b.Cleanup(func() { _ = lk.Close() })
	return lk
}

// BenchmarkUncontended is one acquire and release of a free lock through
// package lock, by contestants that take turns within every iteration (in a
// random order each time), so that a noisy neighbour slows them alike: the
// single-server Redis driver on the first server and this driver over all of
// them, each with TryAcquire and with Acquire; and, for scale, the floor of
// the protocol in raw go-redis calls (SET NX PX, then the compare-and-delete
// script): on the first server alone, and on all of them at once (a goroutine
// per request, done at the second answer). It reports each one's time per
// acquire+release and the ratios of Redlock to Redis, and of the three-server
// floor to the one-server floor: what answering from three servers costs
// here, before any driver.
func BenchmarkUncontended(b *testing.B) {
	urls := benchServers(b)
	ctx := context.Background()
	single := benchRedis(b, urls[0], benchPrefix())
	multi := benchRedlock(b, urls, benchPrefix())
	pair := func(lk *lock.Locker, try bool) func(int) {
		take := lk.Acquire
		if try {
			take = lk.TryAcquire
		}
		return func(int) {
			l, err := take(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	f := newFloor(b, urls)
	defer f.wait()
	contestants := [6]func(int){
		pair(single, true), pair(multi, true), pair(single, false), pair(multi, false),
		func(i int) { f.lockUnlock(f.clients[:1], i) },
		func(i int) { f.lockUnlock(f.clients, i) },
	}
	for i, c := range contestants { // connections made, scripts loaded
		c(-1 - i)
	}
	var spent [len(contestants)]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range rand.Perm(len(contestants)) {
			t := time.Now()
			contestants[k](i)
			spent[k] += time.Since(t)
		}
	}
	b.StopTimer()
	f.wait()
	if err := f.err(); err != nil {
		b.Fatal(err)
	}
	per := func(k int) float64 { return float64(spent[k].Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(0), "redis-try-ns")
	b.ReportMetric(per(1), "redlock-try-ns")
	b.ReportMetric(per(2), "redis-acquire-ns")
	b.ReportMetric(per(3), "redlock-acquire-ns")
	b.ReportMetric(per(4), "floor1-ns")
	b.ReportMetric(per(5), "floor3-ns")
	b.ReportMetric(per(1)/per(0), "redlock/redis-try")
	b.ReportMetric(per(3)/per(2), "redlock/redis-acquire")
	b.ReportMetric(per(5)/per(4), "floor3/floor1")
}

// floor is the raw protocol on plain go-redis clients, for scale.
type floor struct {
	clients []*redis.Client
	wg      sync.WaitGroup // requests still running after their round was decided
	mu      sync.Mutex
	first   error
}

var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func newFloor(b *testing.B, urls []string) *floor {
	f := &floor{}
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			b.Fatal(err)
		}
		c := redis.NewClient(o)
		b.Cleanup(func() { _ = c.Close() })
		f.clients = append(f.clients, c)
	}
	return f
}

// lockUnlock takes and releases a lock on clients at once, each step done
// when a majority answered.
func (f *floor) lockUnlock(clients []*redis.Client, i int) {
	ctx := context.Background()
	key, owner := fmt.Sprintf("bench-floor%d", len(clients)), strconv.Itoa(i)
	f.round(clients, func(c *redis.Client) error { return c.SetNX(ctx, key, owner, 30*time.Second).Err() })
	f.round(clients, func(c *redis.Client) error { return floorRelease.Run(ctx, c, []string{key}, owner).Err() })
}

func (f *floor) round(clients []*redis.Client, do func(*redis.Client) error) {
	if len(clients) == 1 {
		f.fail(do(clients[0]))
		return
	}
	done := make(chan struct{}, len(clients))
	for _, c := range clients {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.fail(do(c))
			done <- struct{}{}
		}()
	}
	for range len(clients)/2 + 1 {
		<-done
	}
}

func (f *floor) fail(err error) {
	if err != nil {
		f.mu.Lock()
		if f.first == nil {
			f.first = err
		}
		f.mu.Unlock()
	}
}

func (f *floor) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

func (f *floor) wait() { f.wg.Wait() }

// BenchmarkContended has 8 goroutines spread over 2 Lockers (separate
// drivers, as separate processes would have) take turns on one key over the
// servers, with a tiny critical section. It reports handoffs/s (acquisitions
// by a different goroutine than the previous one, per second), handoff-share
// (the fraction of acquisitions that were handoffs) and min-share (the fewest
// acquisitions of one goroutine, as a fraction of the fair share: 1 is
// perfectly fair, below 0.5 is starvation).
func BenchmarkContended(b *testing.B) {
	urls := benchServers(b)
	const lockers, goroutines = 2, 8
	prefix := benchPrefix()
	lks := make([]*lock.Locker, lockers)
	for i := range lks {
		lks[i] = benchRedlock(b, urls, prefix)
	}
	// A failure stops every goroutine (a lock whose Release failed stays held).
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		next     atomic.Int64 // acquisitions handed out
		last     atomic.Int64 // goroutine of the previous holder
		handoffs atomic.Int64
		counts   [goroutines]int64
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop()
	}
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
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				counts[g]++
				if last.Swap(int64(g)) != int64(g) {
					handoffs.Add(1)
				}
				if err := l.Release(ctx); err != nil {
					fail(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	minCount := counts[0]
	for _, n := range counts {
		minCount = min(minCount, n)
	}
	b.ReportMetric(float64(handoffs.Load())/elapsed.Seconds(), "handoffs/s")
	b.ReportMetric(float64(handoffs.Load())/float64(b.N), "handoff-share")
	b.ReportMetric(float64(minCount)/(float64(b.N)/goroutines), "min-share")
}

// BenchmarkSets is conformance.BenchmarkSets over the servers, where the
// driver takes free keys with one script call per server (TryAcquireSet).
func BenchmarkSets(b *testing.B) {
	urls := benchServers(b)
	q := make([]string, len(urls))
	for i, u := range urls {
		q[i] = "server=" + u
	}
	u, prefix := &url.URL{Scheme: Scheme, RawQuery: strings.Join(q, "&")}, benchPrefix()
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) {
			return open(ctx, driver.Config{URL: u, Prefix: prefix})
		},
	})
}
