package zkdriver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// A server restarted without its data has forgotten the session and its lock,
// and hands the lock to the next client at once. It also refuses the
// holder's reconnection, because the holder has seen later transactions than
// the empty server has (ZooKeeper's guard against reading older data from a
// lagging server), so go-zookeeper alone would retry until the session
// timeout passed, with another holder meanwhile. The driver takes a refusal by
// every server as reason to ask without that guard, learns that the session
// expired, and closes Lost within a couple of go-zookeeper's one-second
// reconnection rounds, far inside the session timeout.
func TestRestartWithoutDataLosesTheLockPromptly(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	const sessionTimeout = 20 * time.Second
	url := fmt.Sprintf("%s?session_timeout=%v", srv.URL(), sessionTimeout)
	a, _ := mustOpen(t, url, lock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Some history, so that the holder has seen more transactions than the
	// empty server will have when the next client has taken the lock.
	for range 20 {
		l, err := a.Acquire(ctx, "warm-up")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	b, _ := mustOpen(t, url)
	l2, err := b.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Since(up)
	const bound = 5 * time.Second
	select {
	case <-l.Lost():
		lost := time.Since(up)
		t.Logf("restart without data: the next client held the lock %v after the server answered; the old holder's Lost closed %v after (overlap %v)",
			granted.Round(time.Millisecond), lost.Round(time.Millisecond), (lost - granted).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("Lost still open %v after the server came back empty (session timeout %v)", bound, sessionTimeout)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The holder goes on in a new session, and its new locks are not lost.
	l3, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire in the new session: %v", err)
	}
	if err := l3.Refresh(ctx); err != nil {
		t.Errorf("Refresh of a lock taken after the restart: %v", err)
	}
	if isClosed(l3.Lost()) {
		t.Error("a lock taken after the restart is reported lost")
	}
	_ = l3.Release(ctx)
}

// A frozen server hears nothing; once it runs again it expires the sessions it
// has not heard from for their timeout and lets the next client in. The
// holder gives its lock up first: Lost closes once the session timeout, less
// a margin for clock drift, has passed since the server is known to have heard
// of the session (the send time of a sync answered a third of the timeout
// later), whatever the TTL (here far longer).
func TestFrozenServerLosesTheLockBeforeAnotherHolds(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	const sessionTimeout = 4 * time.Second
	url := fmt.Sprintf("%s?session_timeout=%v", srv.URL(), sessionTimeout)
	a, _ := mustOpen(t, url, lock.WithTTL(time.Minute))
	b, _ := mustOpen(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	select {
	case <-l.Lost():
		t.Logf("server frozen: Lost closed %v after the freeze (session timeout %v)", time.Since(frozen).Round(time.Millisecond), sessionTimeout)
	case <-time.After(sessionTimeout + 2*time.Second):
		t.Fatalf("Lost still open %v after the server froze, session timeout %v", sessionTimeout+2*time.Second, sessionTimeout)
	}
	// Past the session timeout: the server expires the holder's session when
	// it runs again, and the other client gets the lock.
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	l2, err := b.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after the expiry, not above the lost lock's %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}
