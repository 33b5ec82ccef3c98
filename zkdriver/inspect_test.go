package zkdriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// inspectEnv is a server, a prefix of the test's own (and of this run's:
// the server is shared by -count repeats), and a context.
func inspectEnv(t *testing.T) (url, base string, ctx context.Context) {
	t.Helper()
	base = testserver.ZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	prefix := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	return base + "?prefix=" + zkdriver.EscapeName(prefix), base, ctx
}

// The label is the lock node's data, written by the create itself (no
// round trip more), so an operator reading the node with zkCli sees who
// holds it; a foreign holder's data (Curator writes its client's address,
// zk.Lock nothing) reads as its owner name.
func TestLabelIsTheLockNodeDataAndForeignDataReadsAsTheOwner(t *testing.T) {
	url, base, ctx := inspectEnv(t)
	lk, d := mustOpen(t, url, lock.WithOwnerName("web-1"))
	conn := zkConn(t, base)

	l, err := lk.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	nodes := children(t, conn, d.LockPath("job"))
	if len(nodes) != 1 {
		t.Fatalf("key node children %q, want one lock node", nodes)
	}
	data, _, err := conn.Get(d.LockPath("job") + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var label struct{ Owner string }
	if err := json.Unmarshal(data, &label); err != nil || label.Owner != "web-1" {
		t.Errorf("lock node data %q (%v), want the JSON label of owner web-1", data, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// zk.Lock: empty data; the node's creation time stands for Since.
	before := time.Now()
	zl := zk.NewLock(conn, d.LockPath("zklock"), zk.WorldACL(zk.PermAll))
	if err := zl.Lock(); err != nil {
		t.Fatal(err)
	}
	in, err := lk.Inspect(ctx, "zklock")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Holders != 1 || in.Owner != "" || in.Since.Before(before.Add(-time.Second)) || in.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("Inspect of a zk.Lock holder: %+v, want held by one, no owner name, Since about %v", in, before)
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}

	// A Curator InterProcessMutex's node: its client's address as data.
	path := d.LockPath("curator")
	if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	node, err := conn.Create(path+"/_c_4bb2bd9d-0e3c-4a43-9a3b-6a0c7a0e2f11-lock-", []byte("10.0.0.7"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if in, err := lk.Inspect(ctx, "curator"); err != nil || !in.Held || in.Owner != "10.0.0.7" {
		t.Errorf("Inspect of a Curator holder: %+v, %v; want held by owner 10.0.0.7", in, err)
	}
	if err := conn.Delete(node, -1); err != nil {
		t.Fatal(err)
	}
}

// Holders and waiters follow the queueing rule: readers before the first
// writer hold, the writer and everything queued after it wait, counted
// exactly.
func TestInspectCountsReadersAndWaitersByTheQueueingRule(t *testing.T) {
	url, _, ctx := inspectEnv(t)
	lk, _ := mustOpen(t, url)
	const key = "rw"
	var held []*lock.Lock
	for range 2 {
		l, err := lk.Acquire(ctx, key, lock.WithShared(true))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	for _, shared := range []bool{false, true} { // a writer, then a reader behind it
		go func() {
			_, err := lk.Acquire(wctx, key, lock.WithShared(shared))
			done <- err
		}()
		want := 1
		if shared {
			want = 2
		}
		waitUntil(t, 10*time.Second, "the waiter queued", func() bool {
			in, err := lk.Inspect(ctx, key)
			return err == nil && in.Waiters == want
		})
	}
	in, err := lk.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || !in.Shared || in.Holders != 2 || in.Waiters != 2 {
		t.Errorf("Inspect with two readers holding, a writer and a reader waiting: %+v, want 2 shared holders, 2 waiters", in)
	}
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled waiter: %v", err)
		}
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A campaigner that waited wins with a token (the pzxid after its
// predecessor's deletion) that the tree does not keep; Campaign's Relabel
// records it in the node, so Leader reports the winner's own term.
func TestLeaderTermOfAWinnerThatWaitedIsItsOwnToken(t *testing.T) {
	url, _, ctx := inspectEnv(t)
	a, _ := mustOpen(t, url)
	b, _ := mustOpen(t, url)
	ld, err := a.Campaign(ctx, "leader", "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *lock.Leadership, 1)
	go func() {
		nl, err := b.Campaign(ctx, "leader", "b")
		if err != nil {
			t.Error(err)
		}
		won <- nl
	}()
	waitUntil(t, 10*time.Second, "the second campaigner queued", func() bool {
		in, err := a.Inspect(ctx, "leader")
		return err == nil && in.Waiters == 1
	})
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	nl := <-won
	if nl == nil {
		return
	}
	l, err := a.Leader(ctx, "leader")
	if err != nil || l.Value != "b" || l.Token != nl.Token() || l.Token <= ld.Token() {
		t.Errorf("Leader = %+v, %v; want b with term %d (after %d)", l, err, nl.Token(), ld.Token())
	}
	if err := nl.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose node carries a watch hears of its eviction at once, as a
// force release; it deletes the tombstone ForceRelease left for it; the next
// holder's token is larger; and the evicted holder's Release frees nothing.
func TestForceReleaseTellsAWatchedHolderAtOnceAndItsTombstoneGoes(t *testing.T) {
	url, base, ctx := inspectEnv(t)
	holder, err := openDriver(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	op, opDriver := mustOpen(t, url)
	lost := make(chan error, 1)
	req := &driver.Request{Key: "stuck", Owner: "o1", TTL: time.Minute, Label: `{"owner":"h","since":1}`,
		Lost: driver.LostFunc(func(err error) {
			select {
			case lost <- err:
			default:
			}
		})}
	g, err := holder.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the watch on the held node", func() bool { return holder.WatchedForTest(req) })
	if err := op.ForceRelease(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, driver.ErrForceReleased) || !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Lost(%v), want ErrNotHeld and ErrForceReleased", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted holder's Lost was not called within 5s (no refresh ran: only its watch could tell)")
	}
	conn := zkConn(t, base)
	if left := children(t, conn, opDriver.Root()+"/.forced"); len(left) != 0 {
		t.Errorf("tombstones left after the holder read its own: %q", left)
	}
	next, err := op.Acquire(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= g.Token {
		t.Errorf("next token %d, the evicted holder's %d", next.Token(), g.Token)
	}
	if err := holder.Release(ctx, req); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("the evicted holder's Release: %v, want ErrNotHeld", err)
	}
	if _, err := op.TryAcquire(ctx, "stuck"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire after the evicted holder's Release: %v, want ErrLocked", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A tombstone whose holder never read it (its driver closed first) is
// deleted by a later ForceRelease once older than its life.
func TestForceReleaseSweepsTombstonesNobodyRead(t *testing.T) {
	url, base, ctx := inspectEnv(t)
	op, opDriver := mustOpen(t, url)
	opDriver.SetTombstoneLifeForTest(time.Millisecond)
	conn := zkConn(t, base)
	dir := opDriver.Root() + "/.forced"
	zl := zk.NewLock(conn, opDriver.LockPath("foreign"), zk.WorldACL(zk.PermAll))
	if err := zl.Lock(); err != nil {
		t.Fatal(err)
	}
	// zk.Lock knows nothing of tombstones: its eviction leaves one.
	if err := op.ForceRelease(ctx, "foreign"); err != nil {
		t.Fatal(err)
	}
	stale := children(t, conn, dir)
	if len(stale) != 1 {
		t.Fatalf("tombstones after evicting a zk.Lock: %q, want one", stale)
	}
	waitUntil(t, 10*time.Second, "a later ForceRelease to sweep the stale tombstone", func() bool {
		l, err := op.Acquire(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		if err := op.ForceRelease(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
		for _, c := range children(t, conn, dir) {
			if c == stale[0] {
				return false
			}
		}
		return true
	})
}

// Watch signals a grant, a relabelling and a release, each after its
// watches are set again, and closes its channel when ctx ends.
func TestWatchSignalsGrantRelabelAndRelease(t *testing.T) {
	url, _, ctx := inspectEnv(t)
	_, d := mustOpen(t, url)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := d.Watch(wctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no signal within 5s of %s", what)
		}
		for { // drop a second signal of the same change
			select {
			case <-ch:
				continue
			default:
			}
			break
		}
	}
	req := &driver.Request{Key: "w", Owner: "o", TTL: time.Minute, Label: `{"owner":"a","since":1}`, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	expect("the grant")
	if err := d.Relabel(ctx, req, `{"owner":"a","since":1,"value":"v2"}`); err != nil {
		t.Fatal(err)
	}
	expect("the relabelling")
	in, err := d.Inspect(ctx, "w")
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Label != `{"owner":"a","since":1,"value":"v2"}` {
		t.Errorf("Inspect after Relabel: %+v, %v; want the new label as given", in, err)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	expect("the release")
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Watch's channel still open 5s after its context ended")
		}
	}
}

// List finds keys by decoding their node names, skips the driver's own
// nodes, and cannot list a key whose name was cut and hashed (documented).
func TestListDecodesNamesAndSkipsHashedOnes(t *testing.T) {
	url, _, ctx := inspectEnv(t)
	lk, _ := mustOpen(t, url)
	long := "jobs/" + strings.Repeat("x", 300)
	var held []*lock.Lock
	for _, k := range []string{"jobs/a b", "jobs/ä/1", ".jobs", long, "other"} {
		l, err := lk.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if err := lk.ForceRelease(ctx, "other"); err != nil { // leaves the tombstones' node
		t.Fatal(err)
	}
	got, err := lk.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".jobs", "jobs/a b", "jobs/ä/1"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("List(\"\") = %q, want %q", got, want)
	}
	if got, err := lk.List(ctx, "jobs/"); err != nil || len(got) != 2 {
		t.Errorf("List(jobs/) = %q, %v; want the two short jobs/ keys", got, err)
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}
