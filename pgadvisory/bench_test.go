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
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
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
			interleave(b, raw, drv)
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
// interleave runs b.N turns of raw and of drv, in alternating blocks of
// contendedBlock so that both meet the same load, and reports them.
func interleave(b *testing.B, raw, drv []func() error) {
	var rawTime, drvTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += contendedBlock {
		n := min(contendedBlock, b.N-done)
		rawTime += runTurns(b, raw, n)
		drvTime += runTurns(b, drv, n)
	}
	b.StopTimer()
	report(b, rawTime, drvTime)
}

func report(b *testing.B, raw, drv time.Duration) {
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(drv.Nanoseconds())/float64(b.N), "driver-ns/op")
	b.ReportMetric(float64(drv)/float64(raw), "driver/raw")
}

// BenchmarkPermits: 16 goroutines take one of 4 permits of one key and give
// it back, in blocks alternating with raw. raw: the n-slot recipe, each
// goroutine on a pinned pool connection of its own, pg_try_advisory_lock on
// each slot from a random one, again after 1 ms when all are held, then
// pg_advisory_unlock. driver: the goroutines spread over 4 Lockers, Acquire
// (lock.WithPermits(4)) then Release. Reported per acquisition, as for
// BenchmarkContended.
func BenchmarkPermits(b *testing.B) {
	const goroutines, permits = 16, 4
	dsn := testserver.Postgres(b)
	pool := benchPool(b, dsn, goroutines)
	base := pgadvisory.LockID(pgadvisory.DefaultPrefix, b.Name())
	raw := make([]func() error, goroutines)
	for g := range raw {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(conn.Release)
		raw[g] = func() error {
			ctx := context.Background()
			first := int64(g)
			for {
				for i := range int64(permits) {
					id := base + (first+i)%permits
					var ok bool
					if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil {
						return err
					}
					if ok {
						_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, id)
						return err
					}
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	drv := make([]func() error, goroutines)
	var lockers []*lock.Locker
	for range permits {
		lockers = append(lockers, benchLocker(b, dsn, "driver"))
	}
	for g := range drv {
		locker := lockers[g%len(lockers)]
		drv[g] = func() error {
			ctx := context.Background()
			l, err := locker.Acquire(ctx, b.Name(), lock.WithPermits(permits))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}
	interleave(b, raw, drv)
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

// BenchmarkSets is conformance.BenchmarkSets on PostgreSQL, whose driver
// takes free keys in one statement (TryAcquireSet); interleaved is the figure
// to read on a loaded machine:
//
//	go test -run '^$' -bench BenchmarkSets -count 6 ./pgadvisory
func BenchmarkSets(b *testing.B) {
	dsn := testserver.Postgres(b)
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(ctx context.Context) (driver.Driver, error) { return pgadvisory.OpenForTest(ctx, dsn) },
	})
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
