package zkdriver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// httpFencedWrite is the paused-holder test's fenced write: a PUT of value to
// the fence.Handler at url, naming the resource "invoice:42" and the token in
// the Fencing-Token header, as a service that is itself the resource is
// written to. A 409 is the fence's refusal.
func httpFencedWrite(ctx context.Context, url string, token uint64, value string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(value))
	if err != nil {
		return err
	}
	fence.SetHeader(req.Header, "invoice:42", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%w: %s", fence.ErrStale, strings.TrimSpace(string(body)))
	default:
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
}

// fencedInvoice is a resource behind fence.Handler: the last value admitted.
type fencedInvoice struct {
	mu    sync.Mutex
	value string
}

func (f *fencedInvoice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.value = string(body)
	f.mu.Unlock()
}

func (f *fencedInvoice) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.value
}

// Kleppmann's scenario on ZooKeeper, where a lock is bound to its session: a
// holder process frozen (SIGSTOP) past its session timeout loses its
// ephemeral node, a second holder takes the lock with a larger token and
// writes the resource (a fence.Handler in front of it); the first, resumed,
// writes as if it still held the lock and is refused with ErrStale, and the
// resource keeps the second holder's value.
func TestPausedHolderProcessIsRefusedByTheFenceOnceItsSessionExpired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	invoice := &fencedInvoice{}
	srv := httptest.NewServer(fence.Handler(fence.NewMemory(), invoice))
	defer srv.Close()

	url := testserver.ZooKeeper(t) + "?session_timeout=2s&prefix=" + zkdriver.EscapeName(t.Name())
	first := staleholder.Start(t, staleholder.Spec{URL: url, Key: "invoice:42", TTL: 2 * time.Second, Resource: srv.URL, First: "holder 1, before"})
	if got := invoice.get(); got != "holder 1, before" {
		t.Fatalf("after the first holder's write the resource holds %q", got)
	}
	first.Freeze(t)

	lk, _ := mustOpen(t, url, lock.WithTTL(2*time.Second))
	l, err := lk.Acquire(ctx, "invoice:42") // once the frozen holder's session expired
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= first.Token {
		t.Fatalf("the second holder's token %d is not above the first's %d", l.Token(), first.Token)
	}
	if err := httpFencedWrite(ctx, srv.URL, l.Token(), "holder 2"); err != nil {
		t.Fatalf("the second holder's write: %v", err)
	}
	if got := first.Write(t, "holder 1, after"); got != staleholder.Stale {
		t.Fatalf("the first holder's late write: %s, want %s", got, staleholder.Stale)
	}
	if got := invoice.get(); got != "holder 2" {
		t.Fatalf("the resource holds %q, want the second holder's value", got)
	}
	if err := httpFencedWrite(ctx, srv.URL, l.Token(), "holder 2, again"); err != nil {
		t.Fatalf("the second holder's second write with the same token: %v", err)
	}
	if !errors.Is(httpFencedWrite(ctx, srv.URL, first.Token, "holder 1, from here"), fence.ErrStale) {
		t.Fatal("a write with the first holder's token from this process was admitted")
	}
}
