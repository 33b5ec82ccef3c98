package redlockdriver

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/faultproxy"
	"github.com/distlock/lock/internal/testserver"
)

// A worker's next pipeline starts with the releases waiting, in their
// order, then the other jobs in theirs, and stops at maxPipelineKeys keys:
// a release queued behind refresh calls of 256 locks each waits for no more
// than one pipeline of them.
func TestQueueSendsReleasesFirstAndCapsAPipelinesKeys(t *testing.T) {
	q := newQueue()
	refreshKeys := make([]string, 256)
	now := time.Now()
	push := func(o op, call int, keys []string) {
		if !q.push(job{op: o, keys: keys, call: call, deadline: now.Add(time.Duration(call) * time.Millisecond)}) {
			t.Fatal("queue full")
		}
	}
	for c := range 40 {
		push(opRefreshBatch, c, refreshKeys)
	}
	push(opAcquire, 100, []string{"a"})
	push(opRelease, 101, []string{"r1"})
	push(opRefreshBatch, 102, refreshKeys)
	push(opRelease, 103, []string{"r2"})

	first := q.take(nil)
	var calls []int
	keys := 0
	for _, j := range first {
		calls = append(calls, j.call)
		keys += len(j.keys)
	}
	if len(calls) < 3 || calls[0] != 101 || calls[1] != 103 || calls[2] != 0 {
		t.Fatalf("first pipeline: calls %v, want the releases 101 and 103 first, then the oldest refresh call 0", calls)
	}
	if keys > maxPipelineKeys {
		t.Errorf("first pipeline carries %d keys, want at most %d", keys, maxPipelineKeys)
	}
	// The rest keep their arrival order: refresh calls 0..39, then the
	// acquire, then refresh call 102.
	var rest []int
	for {
		b := q.take(nil)
		if len(b) == 0 {
			break
		}
		for _, j := range b {
			rest = append(rest, j.call)
		}
	}
	want := append(calls[2:], rest...)
	for i, c := range want {
		exp := i
		switch {
		case i == 40:
			exp = 100
		case i == 41:
			exp = 102
		}
		if c != exp {
			t.Fatalf("after the releases the jobs went in order %v, want refresh calls 0..39, the acquire 100, then 102", want)
		}
	}
	if len(want) != 42 {
		t.Fatalf("%d jobs after the releases, want 42: %v", len(want), want)
	}
	// One job over the cap still goes, alone.
	push(opRefreshBatch, 7, make([]string, maxPipelineKeys+1))
	push(opRefreshBatch, 8, refreshKeys)
	if b := q.take(nil); len(b) != 1 || b[0].call != 7 {
		t.Fatalf("a job over the key cap: took %d jobs, want it alone", len(b))
	}
}

// A release goes ahead of the queue except past a job about its own lock:
// run before its lock's acquire it would delete nothing, and the acquire
// would leave the lock on the server until its TTL. It still overtakes
// refreshes of its lock, and jobs about other locks.
func TestReleaseDoesNotOvertakeAnEarlierJobAboutItsOwnLock(t *testing.T) {
	q := newQueue()
	deadline := time.Now().Add(time.Minute)
	for _, j := range []job{
		{op: opExtend, keys: []string{"k", "x"}, call: 0},
		{op: opAcquire, keys: []string{"k", "k:waiters"}, call: 1},
		{op: opExtend, keys: []string{"k"}, call: 2},
		{op: opRelease, keys: []string{"k", "k:waiters"}, call: 3},
		{op: opRelease, keys: []string{"j", "j:waiters"}, call: 4},
		{op: opAcquire, keys: []string{"j", "j:waiters"}, call: 5},
		{op: opRelease, keys: []string{"x", "x:waiters"}, call: 6},
	} {
		j.deadline = deadline
		if !q.push(j) {
			t.Fatal("queue full")
		}
	}
	var got []int
	for _, j := range q.take(nil) {
		got = append(got, j.call)
	}
	want := []int{4, 6, 0, 1, 2, 3, 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("took calls %v, want %v: the releases of j and x first, the release of k after its acquire", got, want)
	}
}

// A Release must not wait behind the refresh of many locks queued before it:
// with 200,000 locks' refresh calls (782 of 256 locks) queued on every
// server, in arrival order the Release waited for all of them, seconds, past
// the 500 ms it waits for a majority; releases first, it waits for at most
// one pipeline of maxPipelineKeys locks.
func TestReleaseIsNotQueuedBehindTheRefreshOfManyLocks(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200,000 keys to each server")
	}
	ctx, d, admin := batchDriver(t)
	const n, ttl = 200_000, 10 * time.Second
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		reqs[i] = &driver.Request{Key: fmt.Sprintf("bulk/%d", i), Owner: "bulk-owner", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	}
	// Written directly: acquiring 200,000 locks one by one would take a minute.
	for _, a := range admin {
		pipe := a.Pipeline()
		for _, r := range reqs {
			pipe.Set(ctx, d.keys(r.Key).Lock, r.Owner, time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	req := &driver.Request{Key: "released", Owner: "owner-1", TTL: ttl, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var refreshErrs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		refreshErrs = d.RefreshBatch(ctx, reqs)
	}()
	t.Cleanup(wg.Wait)
	queued := func() int {
		least := n
		for _, s := range d.servers {
			s.queue.mu.Lock()
			least = min(least, len(s.queue.jobs))
			s.queue.mu.Unlock()
		}
		return least
	}
	for deadline := time.Now().Add(30 * time.Second); queued() < 500; {
		if time.Now().After(deadline) {
			t.Fatalf("the refresh calls never queued up: %d on the emptiest server", queued())
		}
		time.Sleep(time.Millisecond)
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatalf("Release behind a queued refresh of %d locks: %v", n, err)
	}
	// Released on a majority when Release returns (the last server's
	// answer may still be on its way), on every server soon after.
	gone := func() (n int) {
		for _, a := range admin {
			if v, err := a.Exists(ctx, d.keys(req.Key).Lock).Result(); err == nil && v == 0 {
				n++
			}
		}
		return n
	}
	if g := gone(); g < d.quorum {
		t.Errorf("Release returned with the lock's key gone from %d servers, want a majority (%d)", g, d.quorum)
	}
	for deadline := time.Now().Add(30 * time.Second); gone() < len(admin); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the released lock's key is still on %d servers", len(admin)-gone())
		}
	}
	wg.Wait()
	for i, err := range refreshErrs {
		if err != nil {
			t.Fatalf("refresh of bulk lock %d: %v", i, err)
		}
	}
}

// A Release undoes its own acquire on every server, even on one slow enough
// that the acquire is still queued there when the Release's job comes: with
// the third server 2 ms away (its worker sends what queued meanwhile in one
// pipeline), 300 rounds of acquire and release of one key leave the key on
// no server once every queued job has run.
func TestReleaseLeavesNoLockBehindOnASlowServer(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	px, err := faultproxy.Start(servers[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	if err := px.Latency(2 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	q := []string{}
	for i, s := range servers {
		u := s.URL()
		if i == 2 {
			u = strings.Replace(u, s.Addr(), px.Addr(), 1)
		}
		q = append(q, "server="+url.QueryEscape(u))
	}
	d, err := openURL(ctx, "redlock://?"+strings.Join(q, "&"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range 300 {
		req := &driver.Request{Key: "k", Owner: fmt.Sprintf("owner-%d", i), TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
		if _, err := d.TryAcquire(ctx, req); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := d.Release(ctx, req); err != nil {
			t.Fatalf("round %d: release: %v", i, err)
		}
	}
	d.settle()
	for i, a := range admin {
		if v, err := a.Get(ctx, d.keys("k").Lock).Result(); err != redis.Nil {
			t.Errorf("server %d: after every release the lock holds %q (%v), want no key", i+1, v, err)
		}
	}
}
