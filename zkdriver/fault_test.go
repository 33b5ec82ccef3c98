package zkdriver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// faultSetup gives a test a proxy to the shared server and a prefix of its own.
func faultSetup(t *testing.T) (p *proxy, direct string, prefix string) {
	base := testserver.ZooKeeper(t)
	prefix = "prefix=" + zkdriver.EscapeName(t.Name())
	return newProxy(t, strings.TrimPrefix(base, "zk://")), base + "?" + prefix, prefix
}

// A create whose reply is lost with the connection was applied by the server;
// the driver finds its node by the marker in its name once reconnected and
// uses it, rather than leaving it as an orphan that would block every later
// waiter until the session ends.
func TestLostCreateReplyIsRecoveredWithoutOrphan(t *testing.T) {
	p, direct, prefix := faultSetup(t)
	a, da := mustOpen(t, p.URL(prefix))
	b, _ := mustOpen(t, direct)
	conn := zkConn(t, direct)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p.DropNextCreateReply()
	l, err := a.Acquire(ctx, "invoice:42")
	if err != nil {
		t.Fatalf("Acquire through a dropped create reply: %v", err)
	}
	p.wait("reply dropped")
	if nodes := children(t, conn, da.LockPath("invoice:42")); len(nodes) != 1 {
		t.Fatalf("lock nodes after the recovered create: %v, want exactly one", nodes)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes := children(t, conn, da.LockPath("invoice:42")); len(nodes) != 0 {
		t.Fatalf("lock nodes after Release: %v, want none", nodes)
	}
	l2, err := b.TryAcquire(ctx, "invoice:42")
	if err != nil {
		t.Fatalf("another client's TryAcquire after the release: %v", err)
	}
	_ = l2.Release(ctx)

	// TryAcquire makes one attempt: it fails, and the cleanup after it finds
	// and deletes the node the lost reply was about: at once if the client
	// reconnects while the cleanup waits, and otherwise (here the first
	// reconnection is refused, so go-zookeeper fails the cleanup's request)
	// in the background once the client is back. Either way the node goes,
	// which the test waits for.
	for key, refused := range map[string]int{"invoice:43": 0, "invoice:44": 1} {
		p.RefuseNext(refused)
		p.DropNextCreateReply()
		if _, err := a.TryAcquire(ctx, key); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("TryAcquire through a dropped create reply = %v; want the connection error, marked unavailable", err)
		}
		p.wait("reply dropped")
		waitUntil(t, 20*time.Second, "the node of the lost create reply deleted", func() bool {
			return len(children(t, conn, da.LockPath(key))) == 0
		})
		l3, err := b.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("another client's TryAcquire after the failed one: %v", err)
		}
		_ = l3.Release(ctx)
	}
}

// A create that reaches the server only after its Acquire was cancelled makes
// a node nobody wants: the driver deletes it when the late reply comes.
func TestCreateAppliedAfterCancelLeavesNoOrphan(t *testing.T) {
	p, direct, prefix := faultSetup(t)
	a, da := mustOpen(t, p.URL(prefix))
	b, _ := mustOpen(t, direct)
	conn := zkConn(t, direct)
	const key = "late-create"

	send := p.HoldNextCreate()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, key)
		errc <- err
	}()
	p.wait("create held")
	cancelled := time.Now()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled during its create = %v, want context.Canceled", err)
	}
	if took := time.Since(cancelled); took > time.Second {
		t.Errorf("Acquire returned %v after the cancel", took)
	}
	send() // the create reaches the server now
	waitUntil(t, 10*time.Second, "the late lock node created and deleted", func() bool {
		_, st, err := conn.Exists(da.LockPath(key))
		return err == nil && st.Cversion >= 2 && st.NumChildren == 0
	})
	l, err := b.TryAcquire(context.Background(), key)
	if err != nil {
		t.Fatalf("TryAcquire after the orphan was removed: %v", err)
	}
	_ = l.Release(context.Background())
}

// A partition longer than the session timeout: the holder cannot hear from
// the server, which expires its session and hands the lock on. The holder's
// Lost must close first, even with a TTL far longer than the session timeout.
func TestPartitionLongerThanSessionLosesLockBeforeAnotherHolds(t *testing.T) {
	p, direct, prefix := faultSetup(t)
	a, _ := mustOpen(t, p.URL(prefix+"&session_timeout=2s"), lock.WithTTL(time.Minute))
	b, _ := mustOpen(t, direct)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := a.Acquire(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l     *lock.Lock
		err   error
		stale bool // the first holder's Lost was still open
		at    time.Duration
	}
	partitioned := time.Now()
	done := make(chan result, 1)
	go func() {
		l2, err := b.Acquire(ctx, "leader")
		done <- result{l2, err, !isClosed(l.Lost()), time.Since(partitioned)}
	}()
	p.SetBlackhole(true)
	defer p.SetBlackhole(false)
	select {
	case <-l.Lost():
		t.Logf("Lost closed %v after the partition began", time.Since(partitioned))
	case <-time.After(5 * time.Second):
		t.Fatal("Lost still open 5s into a partition, with a 2s session timeout")
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the other client's Acquire: %v", r.err)
	}
	t.Logf("the other client acquired %v after the partition began", r.at)
	if r.stale {
		t.Error("another client acquired while the partitioned holder's Lost was still open")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release of the lost lock = %v, want ErrLost", err)
	}
	_ = r.l.Release(ctx)
}

// refreshOnceReconnected refreshes l until the refresh confirms it, which it
// does once the client has reconnected: until then each attempt may only fail
// as unavailable (a request the cut connection took with it), never as lost.
func refreshOnceReconnected(t *testing.T, l *lock.Lock, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		err := l.Refresh(ctx)
		switch {
		case err == nil:
			return
		case ctx.Err() != nil:
			t.Fatalf("Refresh did not confirm the lock within %v of the reconnection: %v", limit, err)
		case !errors.Is(err, lock.ErrUnavailable):
			t.Fatalf("Refresh across the reconnection = %v, want success or ErrUnavailable", err)
		}
		select {
		case <-l.Lost():
			t.Fatal("Lost closed during a brief disconnection")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A disconnection shorter than the session timeout is only a suspension: the
// session survives, and with it the lock.
func TestBriefDisconnectionKeepsTheLock(t *testing.T) {
	p, direct, prefix := faultSetup(t)
	a, _ := mustOpen(t, p.URL(prefix+"&session_timeout=5s"), lock.WithTTL(4*time.Second))
	b, _ := mustOpen(t, direct)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := a.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	cut := time.Now()
	refreshOnceReconnected(t, l, 20*time.Second)
	t.Logf("Refresh confirmed the lock %v after the cut", time.Since(cut))
	if isClosed(l.Lost()) {
		t.Fatal("Lost closed after a brief disconnection")
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("another client's TryAcquire = %v, want ErrLocked", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An operator deleting a held lock node ends the lock: a Driver from Open
// watches its nodes and closes Lost at once; one from New finds out at the
// next refresh. Either reports it expired.
func TestDeletedLockNodeClosesLost(t *testing.T) {
	base := testserver.ZooKeeper(t)
	prefix := "prefix=" + zkdriver.EscapeName(t.Name())
	operator := zkConn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	deleteAll := func(path string) {
		for _, n := range children(t, operator, path) {
			if err := operator.Delete(path+"/"+n, -1); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("Open", func(t *testing.T) {
		lk, d := mustOpen(t, base+"?"+prefix, lock.WithTTL(time.Minute))
		l, err := lk.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		deleteAll(d.LockPath("k"))
		select {
		case <-l.Lost():
			t.Logf("Lost closed %v after the delete", time.Since(deleted))
		case <-time.After(5 * time.Second):
			t.Fatal("Lost still open 5s after the lock node was deleted (TTL 1m: only the watch can tell)")
		}
		// A deleted node looks as an expired one does (no tombstone says
		// ForceRelease): the documented cause is expiry.
		if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrExpired) {
			t.Errorf("Err after the delete = %v, want ErrLost and ErrExpired", err)
		}
		if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release after the delete = %v, want ErrNotHeld", err)
		}
	})
	t.Run("New", func(t *testing.T) {
		d, err := zkdriver.New(zkConn(t, base), zkdriver.WithPrefix(t.Name()))
		if err != nil {
			t.Fatal(err)
		}
		const ttl = 900 * time.Millisecond
		lk := lock.New(d, lock.WithTTL(ttl))
		defer lk.Close()
		l, err := lk.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		deleteAll(d.LockPath("k"))
		select {
		case <-l.Lost():
			t.Logf("Lost closed %v after the delete", time.Since(deleted))
		case <-time.After(ttl + time.Second):
			t.Fatalf("Lost still open %v after the lock node was deleted", ttl+time.Second)
		}
		if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrExpired) {
			t.Errorf("Err after the delete = %v, want ErrLost and ErrExpired", err)
		}
	})
}

// After its session expired, a Driver goes on with a new session: the locks of
// the old one are lost, and new ones can be taken.
func TestDriverTakesLocksInANewSessionAfterExpiry(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	lk, d := mustOpen(t, srv.URL()+"?session_timeout=2s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := d.SessionForTest()
	if err := severer(srv.Addr())(ctx, d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost still open 10s after the session expired")
	}
	l2, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire after the session expired: %v", err)
	}
	after, _, _ := d.SessionForTest()
	if after == before {
		t.Errorf("session %x before and after the expiry: want a new one", after)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d in the new session, not above %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// A Driver made by New over a connection the program owns, told the session
// timeout, also gives a lock up before a partitioned session can expire.
func TestNewDriverLosesLockBeforeThePartitionedSessionExpires(t *testing.T) {
	p, direct, _ := faultSetup(t)
	const timeout = 2 * time.Second
	conn, events, err := zk.Connect([]string{strings.TrimPrefix(p.URL(""), "zk://")}, timeout, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	d, err := zkdriver.New(conn, zkdriver.WithPrefix(t.Name()), zkdriver.WithSessionTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	a := lock.New(d, lock.WithTTL(time.Minute))
	defer a.Close()
	b, _ := mustOpen(t, direct+"&prefix="+zkdriver.EscapeName(t.Name()))
	// Wait for the session: a Driver from New does not.
	for conn.State() != zk.StateHasSession {
		<-events
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	stale := make(chan bool, 1)
	go func() {
		l2, err := b.Acquire(ctx, "k")
		stale <- !isClosed(l.Lost())
		if err == nil {
			_ = l2.Release(ctx)
		}
	}()
	p.SetBlackhole(true)
	defer p.SetBlackhole(false)
	if <-stale {
		t.Error("another client acquired while the partitioned holder's Lost was still open")
	}
}

// Goroutines of one process share its session, and each Acquire has a node of
// its own, so they exclude each other like separate clients.
func TestGoroutinesSharingADriverExcludeEachOther(t *testing.T) {
	lk, _ := mustOpen(t, testserver.ZooKeeper(t)+"?prefix="+zkdriver.EscapeName(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var inside atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				l, err := lk.Acquire(ctx, "shared")
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d goroutines hold the lock at once", n)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
