package pgadvisory_test

// Benchmarks of the driver against raw advisory-lock statements written here.
// The machine is shared and its load drifts, so each benchmark runs its two
// contestants interleaved (op by op, or in short alternating blocks) and
// reports both, plus their ratio, from the same stretch of time:
//
//	taskset -c 1 go test -run '^$' -bench . -count 8 ./pgadvisory | tee bench.txt
//	benchstat bench.txt
//
// with DISTLOCK_TEST_POSTGRES_URL naming a server started under taskset -c 0.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

const benchGoroutines = 8

// contendedBlock is how many handoffs each contestant makes before the other
// takes its turn (a few tens of milliseconds).
const contendedBlock = 500

// BenchmarkContended: 8 goroutines take turns on one key. raw: each goroutine
// on a pinned pool connection of its own, pg_advisory_lock then
// pg_advisory_unlock. driver: the 8 goroutines spread over 2 Lockers (as 2
// processes would), Acquire then Release, with fencing tokens (driver) or
// without (driver-nofence), or with the holders table (driver-holders).
// Reported per handoff: raw-ns, driver-ns, and
// driver/raw, the driver's handoff rate as a fraction of raw's.
func BenchmarkContended(b *testing.B) {
	dsn := testserver.Postgres(b)
	for _, impl := range []string{"driver", "driver-nofence", "driver-holders"} {
		b.Run("impl="+impl, func(b *testing.B) {
			raw := rawContended(b, dsn)
			lockers := []*lock.Locker{benchLocker(b, dsn, impl), benchLocker(b, dsn, impl)}
			key := b.Name()
			drv := make([]func() error, benchGoroutines)
			for g := range drv {
				locker := lockers[g%len(lockers)]
				drv[g] = func() error {
					ctx := context.Background()
					l, err := locker.Acquire(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
			}
			var rawTime, drvTime time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += contendedBlock {
				n := min(contendedBlock, b.N-done)
				rawTime += runTurns(b, raw, n)
				drvTime += runTurns(b, drv, n)
			}
			b.StopTimer()
			report(b, rawTime, drvTime)
		})
	}
}

// rawContended returns the raw contestant's turns, one per goroutine, each on
// its own pinned connection.
func rawContended(b *testing.B, dsn string) []func() error {
	pool := benchPool(b, dsn, benchGoroutines)
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, b.Name())
	turns := make([]func() error, benchGoroutines)
	for g := range turns {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(conn.Release)
		turns[g] = func() error {
			ctx := context.Background()
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
				return err
			}
			_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, id)
			return err
		}
	}
	return turns
}

// runTurns runs n turns spread over one goroutine per turn function and returns
// how long they took.
func runTurns(b *testing.B, turns []func() error, n int) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	errc := make(chan error, len(turns))
	start := time.Now()
	for _, turn := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := turn(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	return took
}

// report gives the contestants' times per operation and the driver's time as a
// multiple of raw's (for contended runs: raw's rate over the driver's).
func report(b *testing.B, raw, drv time.Duration) {
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(drv.Nanoseconds())/float64(b.N), "driver-ns/op")
	b.ReportMetric(float64(drv)/float64(raw), "driver/raw")
}

// BenchmarkUncontended: one goroutine takes and gives back a free key,
// alternating raw and driver operation by operation. raw:
// pg_try_advisory_lock then pg_advisory_unlock on a pinned pool connection.
// driver-try: TryAcquire then Release, with a fencing token; driver-acquire:
// Acquire then Release; driver-nofence: TryAcquire then Release without
// fencing; driver-holders: TryAcquire then Release with the holders table
// (WithHolders). driver/raw is the driver's time as a multiple of raw's.
func BenchmarkUncontended(b *testing.B) {
	dsn := testserver.Postgres(b)
	ctx := context.Background()
	for _, impl := range []string{"driver-try", "driver-acquire", "driver-nofence", "driver-holders"} {
		b.Run("impl="+impl, func(b *testing.B) {
			conn, err := benchPool(b, dsn, 1).Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Release()
			id := pgadvisory.LockID(pgadvisory.DefaultPrefix, b.Name()+"/raw")
			locker := benchLocker(b, dsn, impl)
			take := locker.TryAcquire
			if impl == "driver-acquire" {
				take = locker.Acquire
			}
			key := b.Name()
			var rawTime, drvTime time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				var ok bool
				if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || !ok {
					b.Fatal(ok, err)
				}
				if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, id).Scan(&ok); err != nil || !ok {
					b.Fatal(ok, err)
				}
				mid := time.Now()
				l, err := take(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				rawTime += mid.Sub(start)
				drvTime += time.Since(mid)
			}
			b.StopTimer()
			report(b, rawTime, drvTime)
		})
	}
}

// BenchmarkAcquireAll: one goroutine takes free keys and gives them back.
// one-key: Acquire and Release of one key; set-of-4: AcquireAll of 4 keys
// (one statement, see TryAcquireSet) and the set's Release; one-by-one: the
// 4 keys taken by Acquire in order (the path AcquireAll falls back to) and
// released. ns/op includes the releases, one statement per key in every
// contestant; acquire-ns/op is the time to take the keys alone, the figure
// the set's one statement is about. interleaved runs the three op by op
// (the machine's load drifts) and reports each one's acquire-ns/op and
// their ratios to one-key's.
func BenchmarkAcquireAll(b *testing.B) {
	dsn := testserver.Postgres(b)
	ctx := context.Background()
	contestants := []string{"one-key", "set-of-4", "one-by-one"}
	for _, impl := range append(contestants, "interleaved") {
		b.Run(impl, func(b *testing.B) {
			locker := benchLocker(b, dsn, "driver")
			keys := []string{b.Name() + "/0", b.Name() + "/1", b.Name() + "/2", b.Name() + "/3"}
			take := func(impl string) (release func(context.Context) error, err error) {
				switch impl {
				case "one-key":
					l, err := locker.Acquire(ctx, keys[0])
					if err != nil {
						return nil, err
					}
					return l.Release, nil
				case "set-of-4":
					s, err := locker.AcquireAll(ctx, keys)
					if err != nil {
						return nil, err
					}
					return s.Release, nil
				}
				held := make([]*lock.Lock, 0, len(keys))
				for _, k := range keys {
					l, err := locker.Acquire(ctx, k)
					if err != nil {
						return nil, err
					}
					held = append(held, l)
				}
				return func(ctx context.Context) error {
					for i := len(held) - 1; i >= 0; i-- {
						if err := held[i].Release(ctx); err != nil {
							return err
						}
					}
					return nil
				}, nil
			}
			runs := []string{impl}
			if impl == "interleaved" {
				runs = contestants
			}
			acquiring := make([]time.Duration, len(runs))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, run := range runs {
					start := time.Now()
					release, err := take(run)
					if err != nil {
						b.Fatal(err)
					}
					acquiring[j] += time.Since(start)
					if err := release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			for j, run := range runs {
				name := "acquire-ns/op"
				if len(runs) > 1 {
					name = run + "-acquire-ns/op"
				}
				if j > 0 {
					b.ReportMetric(float64(acquiring[j])/float64(acquiring[0]), run+"/one-key")
				}
				b.ReportMetric(float64(acquiring[j].Nanoseconds())/float64(b.N), name)
			}
		})
	}
}

// BenchmarkHold10000Locks takes 10,000 keys from one goroutine and from 8, and
// reports how many connections hold them (conns) and the time per lock taken
// and released.
func BenchmarkHold10000Locks(b *testing.B) {
	const n = 10000
	dsn := testserver.Postgres(b)
	ctx := context.Background()
	for _, goroutines := range []int{1, benchGoroutines} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			d, err := pgadvisory.OpenForTest(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			locker := lock.New(d)
			defer locker.Close()
			var conns int
			for i := 0; i < b.N; i++ {
				held := make([]*lock.Lock, n)
				var wg sync.WaitGroup
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := g; k < n; k += goroutines {
							l, err := locker.Acquire(ctx, fmt.Sprintf("%s/%d/%d", b.Name(), i, k))
							if err != nil {
								b.Error(err)
								return
							}
							held[k] = l
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				conns, _ = sessions(b, dsn, d)
				b.StartTimer()
				for _, l := range held {
					if l != nil {
						_ = l.Release(ctx)
					}
				}
			}
			b.ReportMetric(float64(conns), "conns")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lock")
		})
	}
}

func benchPool(b *testing.B, dsn string, conns int) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func benchLocker(b *testing.B, dsn, impl string) *lock.Locker {
	var opts []pgadvisory.Option
	switch impl {
	case "driver-nofence":
		opts = append(opts, pgadvisory.WithFencing(false))
	case "driver-holders":
		opts = append(opts, pgadvisory.WithHolders(true))
	}
	d, err := pgadvisory.OpenForTest(context.Background(), dsn, opts...)
	if err != nil {
		b.Fatal(err)
	}
	locker := lock.New(d)
	b.Cleanup(func() { _ = locker.Close() })
	return locker
}
