package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
)

// Close while many goroutines hold, wait and refresh: every call ends with success
// or ErrClosed, every held lock is released, and no goroutine is left (TestMain
// runs goleak).
func TestCloseUnderLoadEndsEveryCallAndReleasesEverything(t *testing.T) {
	ctx := context.Background()
	name := t.Name()
	lk := lock.New(memdriver.New(name), lock.WithTTL(5*time.Second))
	other := lock.New(memdriver.New(name))
	defer other.Close()

	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	started := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Half the goroutines contend for a few keys, half hold their own.
			key := fmt.Sprintf("own/%d", i)
			if i%2 == 0 {
				key = fmt.Sprintf("shared/%d", i%5)
			}
			started <- struct{}{}
			for {
				l, err := lk.Acquire(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if err := l.Refresh(ctx); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					// Keep holding until Close takes it away.
					<-l.Lost()
					errs <- l.Release(ctx)
					return
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	time.Sleep(50 * time.Millisecond) // let the load run
	if err := lk.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("a call interrupted by Close returned %v, want ErrClosed", err)
		}
	}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("own/%d", i)
		if i%2 == 0 {
			key = fmt.Sprintf("shared/%d", i%5)
		}
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("key %q still held after Close: %v", key, err)
		}
		_ = l.Release(ctx)
	}
}
