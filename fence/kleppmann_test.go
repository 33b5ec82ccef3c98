package fence_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/memdriver"
)

// Kleppmann's scenario on mem, where the holder is in the test's process: the
// first holder takes the lock and pauses past its TTL (its goroutine blocks,
// and without automatic refresh nothing renews the lease meanwhile), the
// second takes the lock and writes through the fence, and the first, resuming,
// has its write refused with ErrStale; the stored value is the second's.
func TestPausedHolderOnMemIsRefusedWithErrStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "mem://kleppmann-" + t.Name()
	first, err := lock.Open(ctx, url, lock.WithRequired(lock.Capabilities{Fencing: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	m := fence.NewMemory()
	var mu sync.Mutex
	var stored string
	write := func(ctx context.Context, token uint64, value string) error {
		return m.Guard(ctx, "invoice:42", token, func() error { mu.Lock(); stored = value; mu.Unlock(); return nil })
	}

	l1, err := first.Acquire(ctx, "invoice:42", lock.WithTTL(100*time.Millisecond), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	// The first holder writes once while it holds the lock, then pauses.
	if err := write(ctx, l1.Token(), "first, on time"); err != nil {
		t.Fatalf("the holder's own write: %v", err)
	}
	resume, firstDone := make(chan struct{}), make(chan error, 1)
	go func() {
		<-resume // the pause: this goroutine checks nothing until it resumes
		firstDone <- write(context.Background(), l1.Token(), "first, after the pause")
	}()

	// The second holder gets the lock once the first's lease ran out.
	err = second.Do(ctx, "invoice:42", func(ctx context.Context) error {
		l2, _ := lock.FromContext(ctx)
		if l2.Token() <= l1.Token() {
			t.Errorf("second token %d is not above the first's %d", l2.Token(), l1.Token())
		}
		return write(ctx, l2.Token(), "second")
	})
	if err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-firstDone; !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the paused holder's write after resuming: %v, want ErrStale", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if stored != "second" {
		t.Fatalf("stored %q, want the second holder's", stored)
	}
}

// The same through the HTTP handler: the service is the resource.
func TestPausedHolderOnMemIsRefusedByTheHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := newResourceServer(t)
	url := "mem://kleppmann-http-" + t.Name()
	first, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	l1, err := first.Acquire(ctx, "report", lock.WithTTL(100*time.Millisecond), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	err = second.Do(ctx, "report", func(ctx context.Context) error {
		l2, _ := lock.FromContext(ctx)
		code, body, err := put(ctx, rs.URL, "report", l2.Token(), "second")
		if err == nil && code != http.StatusOK {
			t.Errorf("second holder's PUT: %d %s", code, body)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code, body, err := put(ctx, rs.URL, "report", l1.Token(), "first, after the pause")
	if err != nil || code != http.StatusConflict {
		t.Fatalf("paused holder's PUT: %d %q %v, want 409", code, body, err)
	}
	if got := rs.stored(); got != "second" {
		t.Fatalf("stored %q, want the second holder's", got)
	}
}
