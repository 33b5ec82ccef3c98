package zkdriver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// Locking on ever new keys leaves no empty node behind: key nodes are
// containers, which the server deletes once empty. go-zookeeper's zk.Lock makes
// persistent key nodes, which stay; they are the control that shows the
// server's reaper ran.
func TestDistinctKeysLeaveNoEmptyNodesBehind(t *testing.T) {
	fastReaper(t)
	srv := testserver.StartZooKeeper(t)
	lk, d := mustOpen(t, srv.URL())
	conn := zkConn(t, srv.URL())
	ctx := context.Background()

	const keys = 200
	var last *lock.Lock
	for i := 0; i < keys; i++ {
		l, err := lk.Acquire(ctx, fmt.Sprintf("job:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == keys-1 {
			last = l // held through the check below: its key node cannot be reaped yet
			break
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const control = "/zklock-control"
	for i := 0; i < 5; i++ {
		zl := zk.NewLock(conn, fmt.Sprintf("%s/job:%d", control, i), zk.WorldACL(zk.PermAll))
		if err := zl.Lock(); err != nil {
			t.Fatal(err)
		}
		if err := zl.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(children(t, conn, d.Root())); n == 0 {
		t.Fatalf("no key nodes under %s while a lock is held: did the driver make any?", d.Root())
	}
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the server deleting the empty key nodes", func() bool {
		return len(children(t, conn, d.Root())) == 0
	})
	if n := len(children(t, conn, control)); n != 5 {
		t.Errorf("zk.Lock's key nodes: %d left, want all 5 (they are persistent)", n)
	}
}

// A key node the server reaped between two locks of the same key (the driver
// remembered it existed) is made again: the create that finds it missing is
// retried. The new node's sequence restarts at 0, while the token (czxid)
// keeps increasing.
func TestKeyNodeReapedBetweenLocksIsMadeAgain(t *testing.T) {
	fastReaper(t)
	srv := testserver.StartZooKeeper(t)
	lk, d := mustOpen(t, srv.URL())
	conn := zkConn(t, srv.URL())
	ctx := context.Background()
	const key = "report:daily"

	l, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Token()
	nodes := children(t, conn, d.LockPath(key))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the server deleting the empty key node", func() bool {
		ok, _, err := conn.Exists(d.LockPath(key))
		return err == nil && !ok
	})

	l, err = lk.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire after the key node was reaped: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() <= first {
		t.Errorf("token %d after the key node was remade, not above %d", l.Token(), first)
	}
	again := children(t, conn, d.LockPath(key))
	if len(nodes) != 1 || len(again) != 1 {
		t.Fatalf("lock nodes %v then %v, want one each", nodes, again)
	}
	s1, _ := zkdriver.Sequence(nodes[0])
	s2, _ := zkdriver.Sequence(again[0])
	if s1 != 0 || s2 != 0 {
		t.Errorf("sequences %d then %d, want 0 then 0 (a remade key node restarts them)", s1, s2)
	}
}
