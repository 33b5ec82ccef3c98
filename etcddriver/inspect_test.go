package etcddriver_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/etcddriver"
)

func inspectCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rangeKVs reads the keys of the lock on key, oldest first.
func rangeKVs(t *testing.T, c *clientv3.Client, d *etcddriver.Driver, key string) []string {
	t.Helper()
	resp, err := c.Get(context.Background(), d.LockPrefix(key)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Value))
	}
	return out
}

// The key's value is the holder's label, then a newline and its owner: an
// operator's `etcdctl get` shows the holder's name, and Inspect reads it back.
func TestTheKeysValueIsTheLabelThenTheOwner(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second), lock.WithOwnerName("node-7"))
	l := mustAcquire(t, lk, "job")
	vals := rangeKVs(t, newClient(t, url), d, "job")
	if len(vals) != 1 {
		t.Fatalf("values %q, want one", vals)
	}
	label, owner, ok := strings.Cut(vals[0], "\n")
	if !ok || !strings.HasPrefix(label, `{"owner":"node-7","since":`) || !ownerID.MatchString(owner) {
		t.Fatalf("value %q, want the label, a newline and the owner id (25 to 40 hex digits)", vals[0])
	}
	in, err := lk.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Owner != "node-7" || in.Token != l.Token() || in.Waiters != 0 || in.Expires.IsZero() {
		t.Fatalf("Inspect = %+v", in)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A concurrency.Mutex holder is shown by its key's name (its lease, in hex),
// with its create revision as token; our waiter behind it counts.
func TestInspectShowsAConcurrencyMutexHolderByItsKeysName(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	c := newClient(t, url)
	s, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, d.LockPrefix("k"))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := lk.Acquire(wctx, "k")
		waited <- err
	}()
	queued(t, c, d, "k", 2)
	in, err := lk.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(m.Key(), d.LockPrefix("k")+"/")
	if !in.Held || in.Holders != 1 || in.Owner != name || in.Token != uint64(m.Header().Revision) || in.Waiters != 1 {
		t.Fatalf("Inspect = %+v, want the Mutex's key %q at revision %d and one waiter", in, name, m.Header().Revision)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Inspect applies the queueing rule: the readers before a waiting writer
// hold, the writer and a reader behind it wait; a semaphore of 2 with three
// requests has two holders.
func TestInspectAppliesTheQueueingRule(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	c := newClient(t, url)
	r1, r2 := acquireOpts(t, lk, "rw", lock.WithShared(true)), acquireOpts(t, lk, "rw", lock.WithShared(true))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	go func() { _, err := lk.Acquire(wctx, "rw"); done <- err }()
	queued(t, c, d, "rw", 3)
	go func() { _, err := lk.Acquire(wctx, "rw", lock.WithShared(true)); done <- err }()
	queued(t, c, d, "rw", 4)
	in, err := lk.Inspect(ctx, "rw")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Shared || in.Holders != 2 || in.Waiters != 2 || in.Token != max(r1.Token(), r2.Token()) {
		t.Fatalf("Inspect of 2 readers, a writer and a reader waiting = %+v", in)
	}
	cancel()
	for range 2 {
		<-done
	}

	p1, p2 := acquireOpts(t, lk, "sem", lock.WithPermits(2)), acquireOpts(t, lk, "sem", lock.WithPermits(2))
	wctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() { _, err := lk.Acquire(wctx, "sem", lock.WithPermits(2)); done <- err }()
	queued(t, c, d, "sem", 3)
	in, err = lk.Inspect(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if in.Shared || in.Holders != 2 || in.Permits != 2 || in.Waiters != 1 || in.Token != max(p1.Token(), p2.Token()) {
		t.Fatalf("Inspect of a semaphore of 2 with 3 requests = %+v", in)
	}
	cancel()
	<-done
	for _, l := range []*lock.Lock{r1, r2, p1, p2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func acquireOpts(t *testing.T, lk *lock.Locker, key string, opts ...lock.AcquireOption) *lock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lk.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

// ForceRelease deletes the holders' keys and leaves tombstones outside every
// lock's range, on a lease of kit.TombstoneLife of the holder's: no one waits for
// them, List does not show them, and the evicted holder's refresh reads
// them to report ErrForceReleased. Waiters keep their places, and the next
// holder's token is larger.
func TestForceReleaseLeavesTombstonesOutsideTheLocks(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	c := newClient(t, url)
	prefix := testPrefix(t)
	d := newDriver(t, url, etcddriver.WithPrefix(prefix))
	op := newDriver(t, url, etcddriver.WithPrefix(prefix))
	ttl := 5 * time.Second
	held := &driver.Request{Key: "job", Owner: "evicted", TTL: ttl, Label: "L", Lost: driver.LostFunc(func(error) {})}
	g, err := d.TryAcquire(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	waiter := &driver.Request{Key: "job", Owner: "waiter", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	granted := make(chan driver.Grant, 1)
	go func() {
		g, err := op.Acquire(ctx, waiter)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	queued(t, c, d, "job", 2)

	if n, err := op.ForceRelease(ctx, "job"); n != 1 || err != nil {
		t.Fatalf("ForceRelease = %d, %v; want 1 holder", n, err)
	}
	if next := <-granted; next.Token <= g.Token {
		t.Fatalf("the waiter's token %d after the evicted holder's %d", next.Token, g.Token)
	}
	if err := d.Refresh(ctx, held); !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrForceReleased) {
		t.Fatalf("the evicted holder's Refresh: %v, want ErrNotHeld and ErrForceReleased", err)
	}
	if err := d.Release(ctx, held); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the evicted holder's Release: %v, want ErrNotHeld", err)
	}

	tomb, err := c.Get(ctx, prefix+"/!forced/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	// Only this eviction's: an earlier run's (-count) may still be there.
	tombs := slices.DeleteFunc(tomb.Kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision <= int64(g.Token) })
	if len(tombs) != 1 || tombs[0].Lease == 0 {
		t.Fatalf("tombstones %v, want one on a lease", tombs)
	}
	ttlResp, err := c.TimeToLive(ctx, clientv3.LeaseID(tombs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64((kit.TombstoneLife(ttl) + time.Second - 1) / time.Second); ttlResp.GrantedTTL < 10 || ttlResp.GrantedTTL != want {
		t.Fatalf("the tombstone's lease is of %ds, want kit.TombstoneLife of the holder's %v: %ds", ttlResp.GrantedTTL, ttl, want)
	}

	// The waiter holds now; once it leaves, concurrency.Mutex takes the lock
	// at once: the tombstone is no contender.
	if err := op.Release(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	if keys, err := op.List(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("List with only a tombstone = %q, %v; want none", keys, err)
	}
	s, err := concurrency.NewSession(c, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, d.LockPrefix("job"))
	if err := m.TryLock(ctx); err != nil {
		t.Fatalf("concurrency.Mutex after the eviction: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ForceRelease(ctx, "job"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key: %v, want ErrNotHeld", err)
	}
}

// ForceRelease of a read-write lock evicts exactly the holding readers; the
// writer waiting behind them gets it.
func TestForceReleaseEvictsTheReadersBeforeAWaitingWriter(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	r1, r2 := acquireOpts(t, lk, "rw", lock.WithShared(true)), acquireOpts(t, lk, "rw", lock.WithShared(true))
	got := make(chan *lock.Lock, 1)
	go func() {
		l, err := lk.Acquire(ctx, "rw")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	queued(t, newClient(t, url), d, "rw", 3)
	if n, err := d.ForceRelease(ctx, "rw"); n != 2 || err != nil {
		t.Fatalf("ForceRelease = %d, %v; want the 2 readers", n, err)
	}
	w := <-got
	if w.Token() <= max(r1.Token(), r2.Token()) {
		t.Fatalf("the writer's token %d after the readers' %d and %d", w.Token(), r1.Token(), r2.Token())
	}
	for _, r := range []*lock.Lock{r1, r2} {
		waitClosed(t, r.Lost(), 10*time.Second, "an evicted reader's Lost")
		if err := r.Err(); !errors.Is(err, lock.ErrForceReleased) {
			t.Fatalf("an evicted reader's Err: %v", err)
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Relabel rewrites only the label, on the same key with the same lease and
// create revision (the token stays); once the key is gone it refuses and
// writes nothing.
func TestRelabelKeepsTheTokenAndNeverRecreatesTheKey(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	c := newClient(t, url)
	d := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	req := &driver.Request{Key: "k", Owner: "o1", TTL: 5 * time.Second, Label: "before", Lost: driver.LostFunc(func(error) {})}
	g, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Relabel(ctx, req, "after"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, d.LockPrefix("k")+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "after\no1" || uint64(resp.Kvs[0].CreateRevision) != g.Token {
		t.Fatalf("after Relabel: %v, want value \"after\\no1\" at create revision %d", resp.Kvs, g.Token)
	}
	in, err := d.Inspect(ctx, "k")
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != "after" || in.Holders[0].Owner != "o1" || in.Holders[0].Token != g.Token {
		t.Fatalf("Inspect = %+v, %v", in, err)
	}
	if _, err := d.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := d.Relabel(ctx, req, "late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after the eviction: %v, want ErrNotHeld", err)
	}
	if got := rangeKVs(t, c, d, "k"); len(got) != 0 {
		t.Fatalf("keys after a refused Relabel: %q", got)
	}
}

// Watch signals a grant, a relabelling, a waiter's arrival and a release,
// and its channel closes when its context ends or the driver closes.
func TestWatchSignalsChangesAndEndsWithItsContextOrTheDriver(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	d, err := etcddriver.New(newClient(t, url), etcddriver.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	other := newDriver(t, url, etcddriver.WithPrefix(testPrefix(t)))
	wctx, cancel := context.WithCancel(ctx)
	ch, err := d.Watch(wctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	all, err := d.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	signalled := func(what string) {
		t.Helper()
		for _, c := range []<-chan struct{}{ch, all} {
			select {
			case <-c:
			case <-time.After(5 * time.Second):
				t.Fatalf("no signal after %s", what)
			}
		}
	}
	req := &driver.Request{Key: "k", Owner: "o1", TTL: 5 * time.Second, Label: "a", Lost: driver.LostFunc(func(error) {})}
	if _, err := other.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	signalled("a grant")
	if err := other.Relabel(ctx, req, "b"); err != nil {
		t.Fatal(err)
	}
	signalled("a relabelling")
	if err := other.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	signalled("a release")
	cancel()
	for range ch { // drains a pending signal; ends when the channel closes
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for range all {
	}
	if _, err := d.Watch(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// List reads the held keys back from their escaped names, under a prefix.
func TestListUnescapesTheHeldKeysUnderAPrefix(t *testing.T) {
	url := testserverEtcd(t)
	ctx := inspectCtx(t)
	lk, _ := newLocker(t, url, lock.WithTTL(5*time.Second))
	var held []*lock.Lock
	for _, k := range []string{"jobs/a b", "jobs/ключ/🔒", "jobs%2F", "other"} {
		held = append(held, mustAcquire(t, lk, k))
	}
	got, err := lk.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"jobs/a b", "jobs/ключ/🔒"}; !slices.Equal(got, want) {
		t.Fatalf("List(jobs/) = %q, want %q", got, want)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// ownerID is the form driver.Request.Owner documents.
var ownerID = regexp.MustCompile(`^[0-9a-f]{25,40}$`)
