package etcddriver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// Once a Driver holds many locks, a refresh round costs one write and the
// watch's events, not a read per key, and still finds every deleted or
// replaced key: only those locks fail.
func TestWatchedRefreshReadsNoKeyAndFindsDeletedAndReplacedOnes(t *testing.T) {
	ctx, s, d, reqs := watchedLocks(t)
	refreshFailsOnlyDeletedAndReplaced(ctx, t, s.URL(), d, reqs, reqs[17], reqs[230])
}

// When the watch ends (a compaction, a member that lost its leader), the locks
// it covered are read again: a key deleted meanwhile, which no watch
// delivered, fails its lock.
func TestRefreshAfterTheWatchEndsReadsTheKeys(t *testing.T) {
	ctx, s, d, reqs := watchedLocks(t)

	d.EndRefreshWatch()
	admin := newClient(t, s.URL())
	deleted := reqs[42]
	if _, err := admin.Delete(ctx, d.LockPrefix(deleted.Key)+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	// A new watch, which may have started after the delete, does not cover
	// what the old one did.
	if err := d.AwaitRefreshWatch(ctx); err != nil {
		t.Fatal(err)
	}
	before := keyReads(t, s)
	for i, err := range d.RefreshBatch(ctx, reqs) {
		switch {
		case reqs[i] == deleted && !errors.Is(err, driver.ErrNotHeld):
			t.Errorf("lock %s, deleted while no watch ran: %v, want ErrNotHeld", reqs[i].Key, err)
		case reqs[i] != deleted && err != nil:
			t.Errorf("lock %s: %v", reqs[i].Key, err)
		}
	}
	if keyReads(t, s) == before {
		t.Error("the refresh after the watch ended read no key")
	}
}

// watchedLocks holds 300 locks on a Driver of a private server (the read
// counts are theirs) that watches from 100 locks on, and refreshes them until
// the watch covers them all.
func watchedLocks(t *testing.T) (context.Context, *testserver.Server, *etcddriver.Driver, []*driver.Request) {
	t.Helper()
	t.Cleanup(etcddriver.SetWatchThreshold(100))
	s := testserver.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	d := newDriver(t, s.URL(), etcddriver.WithPrefix(testPrefix(t)))
	reqs := holdMany(ctx, t, d, 300)
	untilWatched(ctx, t, s, d, reqs)
	return ctx, s, d, reqs
}

// untilWatched refreshes reqs until a refresh reads no key: the first ones
// start the watch and read the keys it does not cover yet.
func untilWatched(ctx context.Context, t *testing.T, s *testserver.Server, d *etcddriver.Driver, reqs []*driver.Request) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		before := keyReads(t, s)
		for i, err := range d.RefreshBatch(ctx, reqs) {
			if err != nil {
				t.Fatalf("lock %s: %v", reqs[i].Key, err)
			}
		}
		if keyReads(t, s) == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("refreshes of %d locks still read keys after 20s", len(reqs))
		}
	}
}

// keyReads is how many range reads and transactions (reads of keys) s served.
func keyReads(t *testing.T, s *testserver.Server) float64 {
	t.Helper()
	return metric(t, s, `grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"}`) +
		metric(t, s, `grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}`)
}

// No lease carries more than 1,000 of a Driver's locks: etcd applies a put
// with a lease in time linear in the keys already on it (etcd issue
// #15993), so the driver grants another lease of the same TTL instead.
func TestNoLeaseCarriesMoreThanAThousandLocks(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	const n = 2500
	reqs := holdMany(ctx, t, d, n)
	admin := newClient(t, url)
	leases := d.Leases()
	if len(leases) != 3 {
		t.Errorf("%d locks on %d leases, want 3", n, len(leases))
	}
	total := 0
	for _, id := range leases {
		ttl, err := admin.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		if len(ttl.Keys) > 1000 {
			t.Errorf("lease %x carries %d keys, want at most 1,000", id, len(ttl.Keys))
		}
		total += len(ttl.Keys)
	}
	if total != n {
		t.Errorf("the leases carry %d keys, want the %d locks'", total, n)
	}
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Fatalf("lock %s: %v", reqs[i].Key, err)
		}
	}
}
