package etcddriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// Killing the etcd leader while a lock is held loses nothing: etcd keeps leases
// across elections and the driver retries keepalives and refreshes until their
// deadlines, so the holder sees no false Lost and nobody else gets the lock.
func TestLeaderKilledWhileHeldKeepsTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	cl := testserver.EtcdCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The TTL must outlast an election: followers notice the leader gone after
	// an election timeout (1s by default) and elect another within about as long.
	const ttl = 5 * time.Second
	a, _ := newLocker(t, cl.URL(), lock.WithTTL(ttl))
	b, _ := newLocker(t, cl.URL(), lock.WithTTL(ttl))
	l := mustAcquire(t, a, "k")
	token := l.Token()

	leader := leaderOf(t, ctx, cl)
	if err := cl.Members[leader].Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader, member %d", leader)

	// Time must pass: the property is that the lock outlives the election and
	// several TTLs after it.
	end := time.Now().Add(3 * ttl)
	probes, refused := 0, 0
	for time.Now().Before(end) {
		select {
		case <-l.Lost():
			t.Fatalf("Lost closed after the leader was killed (%d probes so far)", probes)
		case <-time.After(100 * time.Millisecond):
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		l2, err := b.TryAcquire(pctx, "k")
		pcancel()
		probes++
		switch {
		case err == nil:
			t.Fatalf("a second holder got the lock (token %d) while the first (token %d) held it", l2.Token(), token)
		case errors.Is(err, lock.ErrLocked):
			refused++
		default:
			t.Logf("probe during the election: %v", err)
		}
	}
	if refused == 0 {
		t.Fatal("no probe reached the cluster after the election")
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after the election: %v", err)
	}
	if l.Token() != token {
		t.Errorf("token changed from %d to %d", token, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustAcquire(t, b, "k")
	if l2.Token() <= token {
		t.Errorf("token %d after %d", l2.Token(), token)
	}
	_ = l2.Release(ctx)
}

// leaderOf returns the index of the cluster's leader.
func leaderOf(t *testing.T, ctx context.Context, cl *testserver.Cluster) int {
	t.Helper()
	c := newClient(t, cl.URL())
	for i, m := range cl.Members {
		st, err := c.Status(ctx, m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if st.Header.MemberId == st.Leader {
			return i
		}
	}
	t.Fatal("no member is the leader")
	return -1
}
