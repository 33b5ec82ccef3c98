package zkdriver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// Locks whose nodes carry a watch are refreshed, however many, by one read of
// the session: the watch reports a deletion before the answer to any later
// request. A node an operator deleted is still found gone, at once.
func TestBatchRefreshOfWatchedLocksIsOneRequest(t *testing.T) {
	url := testserver.ZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A long session timeout spaces the driver's heartbeats (a third of it)
	// far beyond this test, so only the batch writes requests while it counts.
	d, err := openDriver(ctx, url+"?session_timeout=40s&prefix="+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 50
	lost := make(chan string, n)
	reqs := make([]*driver.Request, n)
	for i := range reqs {
		key := fmt.Sprintf("k%d", i)
		reqs[i] = &driver.Request{Key: key, Owner: "o" + key, TTL: 10 * time.Second, Lost: driver.LostFunc(func(error) { lost <- key })}
		if _, err := d.TryAcquire(ctx, reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "every held node watched", func() bool {
		for _, r := range reqs {
			if !d.WatchedForTest(r) {
				return false
			}
		}
		return true
	})

	before := d.RequestsForTest()
	for i, err := range d.RefreshBatch(ctx, reqs) {
		if err != nil {
			t.Fatalf("refresh of %s: %v", reqs[i].Key, err)
		}
	}
	if sent := d.RequestsForTest() - before; sent != 1 {
		t.Fatalf("refreshing %d watched locks sent %d requests, want 1", n, sent)
	}

	operator := zkConn(t, url)
	path := d.LockPath(reqs[7].Key)
	nodes := children(t, operator, path)
	if len(nodes) != 1 {
		t.Fatalf("lock node of %s: %v", reqs[7].Key, nodes)
	}
	if err := operator.Delete(path+"/"+nodes[0], -1); err != nil {
		t.Fatal(err)
	}
	errs := d.RefreshBatch(ctx, reqs)
	for i, err := range errs {
		switch {
		case i == 7 && !errors.Is(err, driver.ErrNotHeld):
			t.Errorf("refresh of the deleted lock = %v, want ErrNotHeld", err)
		case i != 7 && err != nil:
			t.Errorf("refresh of %s = %v", reqs[i].Key, err)
		}
	}
	// The refresh already answered ErrNotHeld (the watch event came first);
	// the Lost callback follows one round trip later, once the driver has
	// looked for a ForceRelease tombstone to name the cause.
	select {
	case key := <-lost:
		if key != reqs[7].Key {
			t.Fatalf("lost %s, want %s", key, reqs[7].Key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deleted lock was not reported lost within 5s of its refresh answering")
	}
	for _, r := range reqs {
		_ = d.Release(ctx, r)
	}
}

// Refresh batches that overlap share one read, however many there are: the
// portable layer sends what falls due within a few milliseconds as a batch,
// and locks taken over a second would otherwise cost a read per batch.
func TestOverlappingRefreshBatchesShareOneRead(t *testing.T) {
	url := testserver.ZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A long session timeout spaces the driver's heartbeats beyond the test;
	// a 30s TTL lets the first batch wait 5s for the others.
	d, err := openDriver(ctx, url+"?session_timeout=40s&prefix="+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SetShareWaitForTest(time.Minute) // the wait is the TTL's, not the cap's
	const batches, each = 4, 5
	var reqs [batches][]*driver.Request
	for b := range reqs {
		for i := range each {
			key := fmt.Sprintf("k%d-%d", b, i)
			r := &driver.Request{Key: key, Owner: "o" + key, TTL: 30 * time.Second, Lost: driver.LostFunc(func(error) {})}
			if _, err := d.TryAcquire(ctx, r); err != nil {
				t.Fatal(err)
			}
			reqs[b] = append(reqs[b], r)
		}
	}
	waitUntil(t, 10*time.Second, "every held node watched", func() bool {
		held, watched := d.HeldForTest()
		return held == batches*each && watched == held
	})

	before := d.RequestsForTest()
	errs := make(chan error, batches*each)
	var wg sync.WaitGroup
	for b := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, err := range d.RefreshBatch(ctx, reqs[b]) {
				errs <- err
			}
		}()
		if b == 0 {
			waitUntil(t, 10*time.Second, "the first batch's read scheduled", d.RoundOpenForTest)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("refresh: %v", err)
		}
	}
	if sent := d.RequestsForTest() - before; sent != 1 {
		t.Fatalf("%d overlapping refresh batches sent %d requests, want 1", batches, sent)
	}
	for _, rs := range reqs {
		for _, r := range rs {
			_ = d.Release(ctx, r)
		}
	}
}

// The session's liveness is confirmed through the leader by a chain of syncs
// that runs whenever the session is connected, held locks or not (a lock
// granted after a quiet spell must find it recent), and it polls the leader no
// more than the heartbeat did: one sync per third of the session timeout.
func TestSyncChainRunsIdleAtMostOncePerThirdOfTheSessionTimeout(t *testing.T) {
	url := testserver.ZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const timeout = 2 * time.Second
	d, err := openDriver(ctx, fmt.Sprintf("%s?session_timeout=%v&prefix=%s", url, timeout, t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, _, negotiated := d.SessionForTest()
	if negotiated != timeout {
		t.Fatalf("negotiated session timeout %v, want %v", negotiated, timeout)
	}
	from, start := d.RequestsForTest(), time.Now()
	const links = 3
	waitUntil(t, 10*negotiated, "three links of the sync chain on an idle driver", func() bool {
		return d.RequestsForTest()-from >= links
	})
	// The first of them may have been due at once (sent right after Open);
	// the two others each wait a third of the timeout after an answer.
	if took, least := time.Since(start), (links-1)*driver.RefreshInterval(negotiated); took < least {
		t.Fatalf("%d syncs in %v on an idle driver; want at most one per %v", links, took, driver.RefreshInterval(negotiated))
	}
}
