package zkdriver_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// benchHeld is how many locks BenchmarkHeldLocks holds at once, as the bench
// harness's held-locks scenario does.
const benchHeld = 10_000

// HeldLocks: one client holds benchHeld locks on distinct keys, taken from 8
// goroutines; it reports this process's heap growth and goroutines per held
// lock (measured once every node carries its watch, the steady state) and,
// for the driver, the requests it writes per second while only holding
// (pings aside), with the bench harness's TTL of 3s. Run it with
// -benchtime=1x: each iteration takes and releases benchHeld locks. With
// HEAPPROF=file (and -memprofilerate=1) the driver's iteration writes the
// heap profile at the moment it measures to file, and the goroutines to
// file.goroutines.
func BenchmarkHeldLocks(b *testing.B) {
	url := testserver.ZooKeeper(b)
	prefix := fmt.Sprintf("bench-%d", benchRun)
	const ttl = 3 * time.Second
	b.Run("driver=zkdriver", func(b *testing.B) {
		ctx := context.Background()
		var bytes, goroutines, reqs float64
		for i := range b.N {
			heap0, g0 := footprint()
			lk, d := mustOpen(b, url+"?prefix="+prefix, lock.WithTTL(ttl))
			locks := make([]*lock.Lock, benchHeld)
			holdEach(b, len(locks), func(k int) error {
				l, err := lk.Acquire(ctx, fmt.Sprintf("held-%d-%d/%d", b.N, i, k))
				locks[k] = l
				return err
			})
			deadline := time.Now().Add(30 * time.Second)
			for {
				held, watched := d.HeldForTest()
				if held == benchHeld && watched == held {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d held locks watched after 30s", watched, held)
				}
				time.Sleep(10 * time.Millisecond)
			}
			heap1, g1 := footprint()
			if f := os.Getenv("HEAPPROF"); f != "" {
				writeProfile(b, "heap", f)
				writeProfile(b, "goroutine", f+".goroutines")
			}
			bytes += float64(heap1-heap0) / benchHeld
			goroutines += float64(g1-g0) / benchHeld
			// The refresh traffic once every lock has been refreshed at
			// least once.
			time.Sleep(ttl / 3)
			r0, t0 := d.RequestsForTest(), time.Now()
			time.Sleep(2 * time.Second)
			reqs += float64(d.RequestsForTest()-r0) / time.Since(t0).Seconds()
			holdEach(b, len(locks), func(k int) error { return locks[k].Release(ctx) })
			runtime.KeepAlive(locks)
			if err := lk.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(bytes/float64(b.N), "B/lock")
		b.ReportMetric(goroutines/float64(b.N), "goroutines/lock")
		b.ReportMetric(reqs/float64(b.N), "requests/s")
	})
	b.Run("driver=zk.Lock", func(b *testing.B) {
		var bytes, goroutines float64
		for i := range b.N {
			heap0, g0 := footprint()
			conn := zkConn(b, url)
			locks := make([]*zk.Lock, benchHeld)
			holdEach(b, len(locks), func(k int) error {
				locks[k] = zk.NewLock(conn, fmt.Sprintf("/bench-zklock-%d/held-%d-%d/%d", benchRun, b.N, i, k), zk.WorldACL(zk.PermAll))
				return locks[k].Lock()
			})
			heap1, g1 := footprint()
			bytes += float64(heap1-heap0) / benchHeld
			goroutines += float64(g1-g0) / benchHeld
			holdEach(b, len(locks), func(k int) error { return locks[k].Unlock() })
			runtime.KeepAlive(locks)
			conn.Close()
		}
		b.ReportMetric(bytes/float64(b.N), "B/lock")
		b.ReportMetric(goroutines/float64(b.N), "goroutines/lock")
	})
}

// writeProfile writes the named runtime profile to file.
func writeProfile(b *testing.B, name, file string) {
	w, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	debug := 0
	if name == "goroutine" {
		debug = 1 // text, grouped by stack
	}
	if err := pprof.Lookup(name).WriteTo(w, debug); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// footprint is the live heap after a collection, and the goroutines.
func footprint() (heap uint64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// holdEach runs op(k) for every k below n from 8 goroutines, as the bench
// harness takes its held locks.
func holdEach(b *testing.B, n int, op func(k int) error) {
	const workers = 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < n; k += workers {
				if err := op(k); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
