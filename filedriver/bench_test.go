package filedriver

import (
	"context"
	"testing"
	"time"

	lock "github.com/distlock/lock"
)

// BenchmarkUncontended measures the mutex hot path: TryAcquire then Release of
// a free key through the portable layer, one client. It is where storing the
// holder's label beside the lock costs, so its figure before and after that
// change is the one to compare.
func BenchmarkUncontended(b *testing.B) {
	d, err := New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	lk := lock.New(d)
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := lk.TryAcquire(ctx, "hot")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
