//go:build linux

package fence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/staleholder"
)

// Kleppmann's scenario on the file backend, with a real holder process: it
// takes the lock, is frozen with SIGSTOP past its TTL, and is evicted with
// ForceRelease (flocks are session-bound: a stopped process keeps its flock);
// the second holder takes the lock and writes through the fence; the first is
// continued, writes, and is refused with 409; the stored value is the second's.
func TestPausedHolderProcessOnFileIsRefusedByTheHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	rs := newResourceServer(t)
	const key = "invoice:42"
	lockURL := (&url.URL{Scheme: "file", Path: dir}).String()

	// The holder's write is holderPut: a PUT to rs.
	first := staleholder.Start(t, staleholder.Spec{URL: lockURL, Key: key, TTL: 200 * time.Millisecond, Resource: rs.URL + " " + key})
	firstToken := first.Token
	// The timeline, logged for docs/FENCING.md.
	begin := time.Now()
	event := func(format string, args ...any) {
		t.Logf("%6.1fms  %s", float64(time.Since(begin).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	event("holder A (pid %d) holds %q with token %d", first.Pid(), key, firstToken)

	stoppedAt := first.Freeze(t)
	event("A frozen (SIGSTOP)")
	second, err := lock.Open(ctx, lockURL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The holder's lease (200ms) runs out while it is frozen; its flock stays.
	for time.Since(stoppedAt) < 300*time.Millisecond {
		if _, err := second.TryAcquire(ctx, key); err == nil {
			t.Fatal("the frozen holder's lock was free without an eviction")
		}
		time.Sleep(50 * time.Millisecond)
	}
	event("A's 200ms lease has run out; its flock stays, so B cannot take the lock")
	if err := second.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	event("operator evicts A (ForceRelease)")
	err = second.Do(ctx, key, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		event("holder B holds %q with token %d", key, l.Token())
		code, body, err := put(ctx, rs.URL, key, l.Token(), "second")
		if err == nil && code != http.StatusOK {
			t.Errorf("second holder's PUT: %d %s", code, body)
		}
		event("B's write, token %d: %d", l.Token(), code)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	event("A continued (SIGCONT); it writes as if it still held the lock")
	if got := first.Write(t, "first, after the pause"); got != staleholder.Stale {
		t.Fatalf("the resumed holder's write: %q, want status 409 naming a stale token", got)
	}
	event("A's write, token %d: %s", firstToken, strings.TrimPrefix(first.Refusal, "status "))
	if got := rs.stored(); got != "second" {
		t.Fatalf("stored %q, want the second holder's", got)
	}
}
