package etcddriver_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/internal/testserver"
)

// setAcquirer is d's driver.SetAcquirer; the test fails if d has none.
func setAcquirer(t *testing.T, d *etcddriver.Driver) driver.SetAcquirer {
	t.Helper()
	sa, ok := driver.Driver(d).(driver.SetAcquirer)
	if !ok {
		t.Fatal("etcddriver.Driver does not implement driver.SetAcquirer")
	}
	return sa
}

// setRequests makes one request per key (given in byte order), each with an
// owner of its own, reporting losses on lost.
func setRequests(lost chan<- string, keys ...string) []*driver.Request {
	reqs := make([]*driver.Request, len(keys))
	for i, k := range keys {
		reqs[i] = &driver.Request{Key: k, Owner: fmt.Sprintf("set-owner-%d", i), TTL: 10 * time.Second,
			Lost: driver.LostFunc(func(error) {
				if lost != nil {
					lost <- k
				}
			})}
	}
	return reqs
}

// keysUnder counts the etcd keys under d's prefix.
func keysUnder(t *testing.T, c *clientv3.Client, d *etcddriver.Driver) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), d.Prefix()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// refusedWholly checks that TryAcquireSet refused reqs with want, wrote
// nothing (only the n keys under d's prefix before it remain), and left no
// request known to d.
func refusedWholly(t *testing.T, c *clientv3.Client, d *etcddriver.Driver, reqs []*driver.Request, want error, n int64) {
	t.Helper()
	if _, err := setAcquirer(t, d).TryAcquireSet(context.Background(), reqs); !errors.Is(err, want) {
		t.Fatalf("TryAcquireSet: %v, want %v", err, want)
	}
	if got := keysUnder(t, c, d); got != n {
		t.Errorf("%d keys under the prefix after the refused set, want %d", got, n)
	}
	for _, r := range reqs {
		if err := d.Release(context.Background(), r); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release(%s) after the refused set: %v, want ErrNotHeld", r.Key, err)
		}
	}
}

func TestFourFreeKeysAreTakenInOneRequest(t *testing.T) {
	url := testserverEtcd(t)
	ctx := context.Background()
	// Every request the driver's client sends, by gRPC method (a retry by
	// the client counts again: the interceptor sits below its retries).
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		calls[method]++
		mu.Unlock()
		return invoke(ctx, method, req, reply, cc, opts...)
	})
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints(url), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{count}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d, err := etcddriver.New(c, etcddriver.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithTTL(10*time.Second))
	t.Cleanup(func() { lk.Close() })
	if err := mustAcquire(t, lk, "warm").Release(ctx); err != nil { // the lease is granted on first use
		t.Fatal(err)
	}

	mu.Lock()
	clear(calls)
	mu.Unlock()
	keys := []string{"a", "b", "c", "d"}
	s, err := lk.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := maps.Clone(calls)
	mu.Unlock()
	if want := map[string]int{"/etcdserverpb.KV/Txn": 1}; !maps.Equal(got, want) {
		t.Errorf("AcquireAll of four free keys sent %v, want one transaction", got)
	}
	other, _ := newLocker(t, url)
	for i, k := range keys {
		if tok, first := s.Lock(k).Token(), s.Lock(keys[0]).Token(); tok != first {
			t.Errorf("member %d's token %d, want the transaction's revision %d as the first's", i, tok, first)
		}
		if _, err := other.TryAcquire(ctx, k); !errors.Is(err, lock.ErrLocked) {
			t.Errorf("another client's TryAcquire(%s) while the set holds it: %v, want ErrLocked", k, err)
		}
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestASetWithOneHeldKeyTakesNothing(t *testing.T) {
	url := testserverEtcd(t)
	ctx := context.Background()
	c := newClient(t, url)
	holder, _ := newLocker(t, url)
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	held := mustAcquire(t, holder, "c")

	refusedWholly(t, c, d, setRequests(nil, "a", "b", "c", "d"), driver.ErrLocked, 1)

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := setRequests(nil, "a", "b", "c", "d")
	grants, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs)
	if err != nil {
		t.Fatalf("TryAcquireSet once every key is free: %v", err)
	}
	if grants[2].Token <= held.Token() {
		t.Errorf("the set's token on c %d, not above the earlier holder's %d", grants[2].Token, held.Token())
	}
	for _, r := range reqs {
		if err := d.Release(ctx, r); err != nil {
			t.Errorf("Release(%s): %v", r.Key, err)
		}
	}
}

func TestASetIsNotGrantedPastAKeysWaiters(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, url)
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))

	// A writer waits behind a reader of b: a reader alone would let a set of
	// readers in, the waiting writer holds them back (writer preference).
	reader, _ := newLocker(t, url)
	writer, _ := newLocker(t, url)
	r, err := reader.Acquire(ctx, "b", lock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	readers := func() []*driver.Request {
		reqs := setRequests(nil, "a", "b")
		for _, q := range reqs {
			q.Shared = true
		}
		return reqs
	}
	joined := readers()
	if _, err := setAcquirer(t, d).TryAcquireSet(ctx, joined); err != nil {
		t.Fatalf("a set of readers beside a reader: %v", err)
	}
	for _, q := range joined {
		if err := d.Release(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	g := newGrants()
	g.acquire(t, ctx, writer, "b", "writer")
	waitQueued(t, c, d, "b", 2)
	refusedWholly(t, c, d, readers(), driver.ErrLocked, 2)
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := g.wait(t, "writer")

	// An exclusive set: the writer hands b over to a waiter that has not
	// yet heard of it; its key already holds b, and the set does not take it.
	g.acquire(t, ctx, writer, "b", "waiter")
	waitQueued(t, c, d, "b", 2)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	refusedWholly(t, c, d, setRequests(nil, "a", "b"), driver.ErrLocked, 1)
	if err := g.wait(t, "waiter").Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestASetOfPermitsIsTakenKeyByKey(t *testing.T) {
	url := testserverEtcd(t)
	c := newClient(t, url)
	lk, d := newLocker(t, url)
	reqs := setRequests(nil, "a", "b")
	for _, r := range reqs {
		r.Permits = 3
	}
	refusedWholly(t, c, d, reqs, driver.ErrUnsupported, 0)

	ctx := context.Background()
	s, err := lk.AcquireAll(ctx, []string{"a", "b"}, lock.WithPermits(3))
	if err != nil {
		t.Fatalf("AcquireAll of permits, key by key: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestASetLongerThanTheServersTransactionLimitIsTakenKeyByKey(t *testing.T) {
	srv := testserver.StartEtcd(t, "--max-txn-ops=3")
	c := newClient(t, srv.URL())
	lk, d := newLocker(t, srv.URL())
	refusedWholly(t, c, d, setRequests(nil, "a", "b", "c", "d"), driver.ErrUnsupported, 0)

	ctx := context.Background()
	reqs := setRequests(nil, "a", "b", "c")
	if _, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs); err != nil {
		t.Fatalf("a set within the limit: %v", err)
	}
	for _, r := range reqs {
		if err := d.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lk.AcquireAll(ctx, []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatalf("AcquireAll past the limit, key by key: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestASetsLocksAreRefreshedInspectedReleasedAndLostAsSingleOnes(t *testing.T) {
	url := testserverEtcd(t)
	ctx := context.Background()
	c := newClient(t, url)
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	lost := make(chan string, 4)
	reqs := setRequests(lost, "a", "b", "c", "d")
	grants, err := setAcquirer(t, d).TryAcquireSet(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Errorf("RefreshBatch: %s: %v", reqs[i].Key, err)
		}
	}
	if err := d.Refresh(ctx, reqs[1]); err != nil {
		t.Errorf("Refresh(b): %v", err)
	}
	info, err := d.Inspect(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].Owner != reqs[2].Owner || info.Holders[0].Token != grants[2].Token {
		t.Errorf("Inspect(c): %+v, want the set's member %s with token %d", info.Holders, reqs[2].Owner, grants[2].Token)
	}
	if err := d.Release(ctx, reqs[0]); err != nil {
		t.Errorf("Release(a): %v", err)
	}
	if err := d.Release(ctx, reqs[0]); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release(a) again: %v, want ErrNotHeld", err)
	}
	if n, err := d.ForceRelease(ctx, "d"); err != nil || n != 1 {
		t.Errorf("ForceRelease(d): %d, %v; want 1 holder evicted", n, err)
	}
	if err := d.Refresh(ctx, reqs[3]); !errors.Is(err, driver.ErrForceReleased) {
		t.Errorf("Refresh(d) after ForceRelease: %v, want ErrForceReleased", err)
	}
	if err := sever(ctx, c, d); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for seen := map[string]bool{}; !seen["b"] || !seen["c"]; {
		select {
		case k := <-lost:
			if k == "a" {
				t.Error("loss of a reported after its release")
			}
			seen[k] = true
		case <-timeout:
			t.Fatalf("the lease's end reported for %v, want b and c", seen)
		}
	}
}
