package redisdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/faultproxy"
	"github.com/distlock/lock/internal/testserver"
)

// Loss causes the conformance suite cannot produce on Redis: a lock key that
// holds another owner when its holder refreshes. The holder's own validity
// deadline always passes before the server expires its key (the key's TTL counts
// from when the SET arrived, later than the grant), so a takeover is seen only
// when the key was deleted or overwritten by someone else: an operator's
// cleanup, or a client of the plain SET NX pattern.

// causeLocker opens a Locker over its own driver on the shared server.
func causeLocker(t *testing.T, ctx context.Context, url string, opts ...lock.Option) (*lock.Locker, *Driver) {
	t.Helper()
	d, err := openURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, opts...)
	t.Cleanup(func() { _ = lk.Close() })
	return lk, d
}

// The key of a held lock is replaced in one step (DEL and a plain SET of
// another owner's value, as a standard SET NX client takes it after an
// operator's cleanup): the holder's next automatic refresh finds another owner,
// Lost closes, and Err and Do's context.Cause match ErrLost and ErrTakenOver;
// the holder's Release leaves the other owner's key alone.
func TestRefreshFindingAnotherOwnersValueReportsTakenOver(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 1500 * time.Millisecond // a refresh every 500ms
	lk, d := causeLocker(t, ctx, url, lock.WithTTL(ttl))
	admin := adminClient(t, url)
	key := "taken-over-" + randomHex(4)
	k := d.keys(key)

	started := make(chan struct{})
	fnCause := make(chan error, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- lk.Do(ctx, key, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			fnCause <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	select {
	case <-started:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	}
	if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, k.Lock)
		p.Set(ctx, k.Lock, "standard-client", time.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var cause error
	select {
	case cause = <-fnCause:
	case <-time.After(ttl):
		t.Fatalf("Do's fn still running %v after another owner took the key", ttl)
	}
	if !errors.Is(cause, lock.ErrLost) || !errors.Is(cause, lock.ErrTakenOver) {
		t.Errorf("fn's context.Cause = %v, want ErrLost and ErrTakenOver", cause)
	}
	if err := <-doErr; !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrTakenOver) {
		t.Errorf("Do = %v, want ErrLost and ErrTakenOver", err)
	}
	if v, err := admin.Get(ctx, k.Lock).Result(); err != nil || v != "standard-client" {
		t.Errorf("the other owner's key after the holder gave up = %q, %v; want it untouched", v, err)
	}
}

// An operator deletes a held lock's key and another distlock client takes the
// lock: the first holder's refresh finds the new owner, its Refresh and Err
// match ErrLost and ErrTakenOver, and its Release does not free the new owner's
// lock.
func TestRefreshAfterAnotherClientTookTheKeyReportsTakenOver(t *testing.T) {
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The refresh is made by hand, so that none comes between the DEL and the
	// other client's grant (it would find the key gone: ErrExpired).
	a, da := causeLocker(t, ctx, url, lock.WithTTL(10*time.Second), lock.WithAutoRefresh(false))
	b, _ := causeLocker(t, ctx, url)
	c, _ := causeLocker(t, ctx, url)
	admin := adminClient(t, url)
	key := "taken-over-" + randomHex(4)

	l, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, da.keys(key).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the key was deleted: %v", err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrTakenOver) {
		t.Errorf("Refresh of the first holder = %v, want ErrLost and ErrTakenOver", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost still open after Refresh found another owner")
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrTakenOver) {
		t.Errorf("Err of the first holder = %v, want ErrLost and ErrTakenOver", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release of the first holder = %v, want ErrLost", err)
	}
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire while the new owner holds the lock = %v, want ErrLocked", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Release that gets no answer in time (its request reaches the server
// late, through a slow link, and runs there) leaves the lock held; the
// refresh that then finds the lock gone says it may be that Release's doing,
// in Err and in the retried Release's error, while still matching ErrLost as
// before.
func TestLossAfterAnUnansweredReleaseSaysTheReleaseMayHaveRemovedIt(t *testing.T) {
	srv := testserver.StartRedis(t)
	px, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A TTL of 3 s: refreshes (every second) take 300 ms through the slow link.
	lk, d := causeLocker(t, ctx, strings.Replace(srv.URL(), srv.Addr(), px.Addr(), 1), lock.WithTTL(3*time.Second))
	admin := adminClient(t, srv.URL())
	// A lock taken and released first, so that the server has the release
	// script: a first EVALSHA would come back NOSCRIPT, and its EVAL would
	// never be sent once the Release has given up.
	warm, err := lk.Acquire(ctx, "unanswered-release-warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	const key = "unanswered-release"
	l, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Each way takes 150 ms now: the Release gives up after 100 ms, before
	// its request has even reached the server, which runs it at 150 ms.
	if err := px.Latency(150 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = l.Release(rctx)
	rcancel()
	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release through the slow link = %v, want an error of unknown outcome", err)
	}

	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the lock whose release the server ran late was never reported lost")
	}
	if err := px.Heal(); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Exists(ctx, d.keys(key).Lock).Result(); err != nil || n != 0 {
		t.Fatalf("the lock's key is still there (%d, %v): the late release did not run; the loss: %v", n, err, l.Err())
	}
	const says = "after a Release that got no answer"
	lost := l.Err()
	if !errors.Is(lost, lock.ErrLost) || !strings.Contains(lost.Error(), says) {
		t.Errorf("Err() = %v, want ErrLost saying %q", lost, says)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) || !strings.Contains(err.Error(), says) {
		t.Errorf("Release after the loss = %v, want ErrNotHeld saying %q", err, says)
	}
}
