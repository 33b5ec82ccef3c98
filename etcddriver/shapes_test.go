package etcddriver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
)

// waitQueued waits until the lock range of key holds n keys: the requests
// started before have reached etcd, in that order.
func waitQueued(t *testing.T, c *clientv3.Client, d *etcddriver.Driver, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Get(context.Background(), d.LockPrefix(key)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys queued on %q, want %d", resp.Count, key, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
	}
}

// grants records the order in which Acquire calls started in goroutines
// return.
type grants struct {
	mu    sync.Mutex
	order []string
	locks map[string]chan *lock.Lock
}

func newGrants() *grants { return &grants{locks: map[string]chan *lock.Lock{}} }

func (g *grants) acquire(t *testing.T, ctx context.Context, lk *lock.Locker, key, name string) {
	ch := make(chan *lock.Lock, 1)
	g.mu.Lock()
	g.locks[name] = ch
	g.mu.Unlock()
	go func() {
		l, err := lk.Acquire(ctx, key)
		if err != nil {
			t.Errorf("%s: Acquire: %v", name, err)
			ch <- nil
			return
		}
		g.mu.Lock()
		g.order = append(g.order, name)
		g.mu.Unlock()
		ch <- l
	}()
}

// wait returns the lock of name once its Acquire returned.
func (g *grants) wait(t *testing.T, name string) *lock.Lock {
	t.Helper()
	g.mu.Lock()
	ch := g.locks[name]
	g.mu.Unlock()
	select {
	case l := <-ch:
		if l == nil {
			t.FailNow()
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not granted", name)
		return nil
	}
}

func (g *grants) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.order, ", ")
}

// Each request's key names its shape after the lock's range, so a reader can
// find the last writer before it in one read and a permit the semaphore's n.
func TestShapeKeysNameTheirShape(t *testing.T) {
	url := testserverEtcd(t)
	ctx := context.Background()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	c := newClient(t, url)
	for _, tc := range []struct {
		opt  lock.Option
		name string
	}{
		{lock.WithShared(false), ""},
		{lock.WithShared(true), "read/"},
		{lock.WithPermits(3), "sem/3/"},
	} {
		key := "shape:" + tc.name
		l, err := lk.Acquire(ctx, key, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(ctx, d.LockPrefix(key)+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s/%s%x", d.LockPrefix(key), tc.name, int64(d.Leases()[0]))
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != want {
			t.Errorf("keys %v, want one named %q", resp.Kvs, want)
		} else if uint64(resp.Kvs[0].CreateRevision) != l.Token() {
			t.Errorf("token %d, want the key's create revision %d", l.Token(), resp.Kvs[0].CreateRevision)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The queueing rule: readers that arrived before a waiting writer keep their
// turn, readers that arrive after it wait behind it (TryAcquire too), and
// tokens follow the queue.
func TestReadersBeforeAWaitingWriterKeepTheirTurnAndLaterOnesWaitBehindIt(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	shared := lock.WithShared(true)
	w0, d := newLocker(t, url)
	ra, _ := newLocker(t, url, shared)
	w1, _ := newLocker(t, url)
	rb, _ := newLocker(t, url, shared)
	const key = "rule"
	g := newGrants()

	first, err := w0.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	g.acquire(t, ctx, ra, key, "reader before the writer")
	waitQueued(t, c, d, key, 2)
	g.acquire(t, ctx, w1, key, "writer")
	waitQueued(t, c, d, key, 3)
	g.acquire(t, ctx, rb, key, "reader after the writer")
	waitQueued(t, c, d, key, 4)

	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := g.wait(t, "reader before the writer")
	if _, err := rb.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a reader's TryAcquire while a writer waits = %v, want ErrLocked", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := g.wait(t, "writer")
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := g.wait(t, "reader after the writer")
	if want := "reader before the writer, writer, reader after the writer"; g.String() != want {
		t.Errorf("granted in the order %s, want %s", g, want)
	}
	if !(first.Token() < a.Token() && a.Token() < w.Token() && w.Token() < b.Token()) {
		t.Errorf("tokens %d, %d, %d, %d do not increase along the queue", first.Token(), a.Token(), w.Token(), b.Token())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A semaphore admits its waiters in arrival order, whichever holder gives its
// permit back: a waiter counts the keys before it, not one predecessor.
func TestPermitWaitersAreAdmittedInArrivalOrderWhicheverHolderLeaves(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	two := lock.WithPermits(2)
	lk, d := newLocker(t, url, two)
	const key = "sem"
	g := newGrants()
	a, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	g.acquire(t, ctx, lk, key, "first waiter")
	waitQueued(t, c, d, key, 3)
	g.acquire(t, ctx, lk, key, "second waiter")
	waitQueued(t, c, d, key, 4)

	if err := b.Release(ctx); err != nil { // the later holder leaves first
		t.Fatal(err)
	}
	first := g.wait(t, "first waiter")
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire with both permits held and a waiter queued = %v, want ErrLocked", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := g.wait(t, "second waiter")
	if want := "first waiter, second waiter"; g.String() != want {
		t.Errorf("granted in the order %s, want %s", g, want)
	}
	for _, l := range []*lock.Lock{first, second} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, c, d, key, 0) // a failed TryAcquire leaves no key
}

// A key is a semaphore of one n or a read-write lock: a request that meets
// another shape in the queue it would wait in is ErrInvalidArgument and leaves
// no key behind.
func TestMismatchedShapesAreInvalidArgument(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	for _, tc := range []struct {
		name  string
		held  lock.Option
		asked lock.Option
	}{
		{"permits of another n", lock.WithPermits(2), lock.WithPermits(3)},
		{"shared on a semaphore", lock.WithPermits(2), lock.WithShared(true)},
		{"exclusive on a semaphore", lock.WithPermits(2), lock.WithShared(false)},
		{"permit on a shared lock", lock.WithShared(true), lock.WithPermits(2)},
		{"permit on an exclusive lock", lock.WithShared(false), lock.WithPermits(2)},
	} {
		key := "mismatch/" + tc.name
		h, err := lk.Acquire(ctx, key, tc.held)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.TryAcquire(ctx, key, tc.asked); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: TryAcquire = %v, want ErrInvalidArgument", tc.name, err)
		}
		if _, err := lk.Acquire(ctx, key, tc.asked); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: Acquire = %v, want ErrInvalidArgument", tc.name, err)
		}
		waitQueued(t, c, d, key, 1)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// etcd's concurrency.Mutex (and etcdctl lock) waits for every key before its
// own, readers included, and readers wait for it: they exclude each other.
func TestReadersAndConcurrencyMutexExcludeEachOther(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	lk, d := newLocker(t, url, lock.WithShared(true), lock.WithTTL(5*time.Second))
	const key = "reader-vs-mutex"
	session, err := concurrency.NewSession(newClient(t, url), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	m := concurrency.NewMutex(session, d.LockPrefix(key))

	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a reader's TryAcquire while concurrency.Mutex holds = %v, want ErrLocked", err)
	}
	g := newGrants()
	g.acquire(t, ctx, lk, key, "reader")
	waitQueued(t, c, d, key, 2)
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := g.wait(t, "reader")

	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("concurrency.Mutex TryLock while a reader holds = %v, want concurrency.ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	waitQueued(t, c, d, key, 2)
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("concurrency.Mutex Lock after the reader's release: %v", err)
	}
	if rev := m.Header().Revision; uint64(rev) <= r.Token() {
		t.Errorf("concurrency.Mutex acquired at revision %d, not after the reader's token %d", rev, r.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcd's recipe.RWMutex names its readers as ours (read/), so readers of both
// hold together, and its writers (write/...) are exclusive to both sides. (Its
// readers wait only for keys under write/, not for ours or concurrency.Mutex's
// writers: see the package doc.)
func TestRecipeRWMutexReadersShareAndItsWritersExclude(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	lk, d := newLocker(t, url, lock.WithShared(true), lock.WithTTL(5*time.Second))
	const key = "reader-vs-recipe"
	session, err := concurrency.NewSession(newClient(t, url), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	rw := recipe.NewRWMutex(session, d.LockPrefix(key))

	r, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.RLock(); err != nil { // returns at once: readers together
		t.Fatal(err)
	}
	if err := rw.RUnlock(); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- rw.Lock() }()
	waitQueued(t, c, d, key, 2)
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("our reader's TryAcquire behind recipe.RWMutex's waiting writer = %v, want ErrLocked", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("recipe.RWMutex Lock after our reader's release: %v", err)
	}
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("our reader's TryAcquire while recipe.RWMutex's writer holds = %v, want ErrLocked", err)
	}
	if err := rw.Unlock(); err != nil {
		t.Fatal(err)
	}
	r, err = lk.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("our reader's TryAcquire after recipe.RWMutex's writer unlocked: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
