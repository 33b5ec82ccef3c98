package etcddriver

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The validity the portable layer counts for a grant or a refresh (its start
// plus the TTL, less the drift) ends no later than the lease's deadline: etcd
// expires the lease a lease TTL after its last renewal, not after the put or
// the read, and another client can take the key then. (The soak found grants
// claiming up to a third of a TTL more, as two holders of a frozen client's
// key.)
func TestGrantAndRefreshValidityEndByTheLeasesDeadline(t *testing.T) {
	url := testserver.Etcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(strings.TrimPrefix(url, "etcd://"), ","),
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := New(c, WithPrefix("/distlock-test/"+t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ttl := max(2*time.Second, d.Capabilities().MinTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := &driver.Request{Key: "first", Owner: "o1", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, first); err != nil {
		t.Fatal(err)
	}
	d.held.Lock()
	s := d.lookupLocked(first).s
	d.held.Unlock()
	// ageLease waits, with a deadline, until the lease's last renewal is a
	// sixth of the TTL old (keepalives come every third of it).
	ageLease := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			d.held.Lock()
			age := time.Since(s.confirmed)
			d.held.Unlock()
			if age >= ttl/6 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lease was renewed %v ago, never a sixth of the TTL", age)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	deadline := func() time.Time {
		d.held.Lock()
		defer d.held.Unlock()
		return s.deadlineLocked()
	}

	ageLease()
	second := &driver.Request{Key: "second", Owner: "o2", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	g, err := d.TryAcquire(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if end, dl := g.Start.Add(ttl-driver.Drift(ttl)), deadline(); end.After(dl) {
		t.Errorf("the grant counts validity until %v after the lease's deadline", end.Sub(dl))
	}

	ageLease()
	start := time.Now()
	if err := d.Refresh(ctx, second); err != nil {
		t.Fatal(err)
	}
	if end, dl := start.Add(ttl-driver.Drift(ttl)), deadline(); end.After(dl) {
		t.Errorf("the refresh counts validity until %v after the lease's deadline", end.Sub(dl))
	}

	ageLease()
	start = time.Now()
	if errs := d.RefreshBatch(ctx, []*driver.Request{first, second}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if end, dl := start.Add(ttl-driver.Drift(ttl)), deadline(); end.After(dl) {
		t.Errorf("the batch refresh counts validity until %v after the lease's deadline", end.Sub(dl))
	}
}
