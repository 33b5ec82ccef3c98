package etcddriver_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
)

// etcd's own concurrency.Mutex, written by others, and this driver contend for the
// same lock: each waits for the other and neither takes it while the other holds.
func TestConcurrencyMutexAndDriverExcludeEachOther(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	const key = "invoice:42/α"

	session, err := concurrency.NewSession(newClient(t, url), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	m := concurrency.NewMutex(session, d.LockPrefix(key))

	// The Mutex holds: we cannot take it, and a waiter of ours wakes when it unlocks.
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while concurrency.Mutex holds = %v, want ErrLocked", err)
	}
	got := make(chan *lock.Lock, 1)
	go func() {
		l, err := lk.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("Acquire returned while concurrency.Mutex held the lock")
	case <-time.After(300 * time.Millisecond): // time must pass to show it waits
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var l *lock.Lock
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return after concurrency.Mutex unlocked")
	}
	if l == nil {
		t.FailNow()
	}

	// We hold: the Mutex cannot take it, and its Lock returns after our release.
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("concurrency.Mutex TryLock while we hold = %v, want concurrency.ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	select {
	case err := <-locked:
		t.Fatalf("concurrency.Mutex Lock returned (%v) while we held the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("concurrency.Mutex Lock after our release: %v", err)
	}
	// Its key is in our key's range with a higher create revision than our token.
	if rev := m.Header().Revision; uint64(rev) <= l.Token() {
		t.Errorf("concurrency.Mutex acquired at revision %d, not after our token %d", rev, l.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Under contention from goroutines using concurrency.Mutex and goroutines using
// the driver, on two processes' worth of clients each, there is never more than
// one holder.
func TestMixedContentionWithConcurrencyMutexHasOneHolder(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const key, rounds = "mixed", 20
	var inside, count atomic.Int32
	enter := func() {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%d holders at once", n)
		}
		count.Add(1)
		time.Sleep(time.Millisecond)
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	var name string
	for c := 0; c < 2; c++ {
		lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
		name = d.LockPrefix(key)
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := lk.Acquire(ctx, key)
					if err != nil {
						t.Error(err)
						return
					}
					enter()
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	for c := 0; c < 2; c++ {
		client := newClient(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := concurrency.NewSession(client, concurrency.WithTTL(5))
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			m := concurrency.NewMutex(s, name)
			for r := 0; r < rounds; r++ {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				enter()
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if want := int32(6 * rounds); count.Load() != want {
		t.Errorf("%d critical sections, want %d", count.Load(), want)
	}
}

// etcdctl lock, the command-line tool, waits for our lock and excludes us while
// it holds, when given Driver.LockPrefix's name.
func TestEtcdctlLockAndDriverExcludeEachOther(t *testing.T) {
	bin, err := exec.LookPath("etcdctl")
	if err != nil {
		t.Skip("etcdctl not in PATH (Debian: apt-get install etcd-client)")
	}
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second))
	const key = "report:daily"
	l, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	// etcdctl lock runs the command only while it holds the lock; the command says
	// so and then waits until the test creates a file (etcdctl gives the command no
	// stdin to wait on).
	done := filepath.Join(t.TempDir(), "done")
	cmd := exec.CommandContext(ctx, bin, "--endpoints="+strings.Join(endpoints(url), ","), "lock", d.LockPrefix(key), "--",
		"sh", "-c", `echo holding; while [ ! -e "$0" ]; do sleep 0.02; done`, done)
	cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	finish := func() { _ = os.WriteFile(done, nil, 0o600) }
	defer cmd.Wait()
	defer finish()
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case line := <-lines:
		t.Fatalf("etcdctl lock ran its command (%q) while we held the lock", line)
	case <-time.After(500 * time.Millisecond): // time must pass to show it waits
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-lines:
		if line != "holding" {
			t.Fatalf("etcdctl lock printed %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("etcdctl lock did not take the lock after our release")
	}
	if _, err := lk.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while etcdctl lock holds = %v, want ErrLocked", err)
	}
	finish()
	l2, err := lk.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire after etcdctl lock's command ended: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcd's concurrency.Election on Driver.LockPrefix(name) and Campaign on name
// campaign in one range for one leadership: each waits for the other, our
// Leader shows an Election's leader (its value as the owner name, its create
// revision as the term), and the Election's Leader shows ours (our label and
// owner as its value).
func TestCampaignAndConcurrencyElectionShareOneLeadership(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, d := newLocker(t, url, lock.WithTTL(5*time.Second), lock.WithOwnerName("ours"))
	c := newClient(t, url)
	newElection := func() *concurrency.Election {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(5))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return concurrency.NewElection(s, d.LockPrefix("svc"))
	}
	theirs := newElection()
	if err := theirs.Campaign(ctx, "10.0.0.9:80"); err != nil {
		t.Fatal(err)
	}
	l, err := lk.Leader(ctx, "svc")
	if err != nil || l.Owner != "10.0.0.9:80" || l.Token != uint64(theirs.Rev()) {
		t.Fatalf("Leader while concurrency.Election leads = %+v, %v; want its value and revision %d", l, err, theirs.Rev())
	}

	var resigned atomic.Bool
	won := make(chan *lock.Leadership, 1)
	go func() {
		ld, err := lk.Campaign(ctx, "svc", "10.0.0.1:80")
		if err != nil {
			t.Error(err)
		} else if !resigned.Load() {
			t.Error("Campaign won while concurrency.Election led")
		}
		won <- ld
	}()
	queued(t, c, d, "svc", 2)
	resigned.Store(true)
	if err := theirs.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ld := <-won
	if ld == nil {
		t.FailNow()
	}
	leader, err := newElection().Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := string(leader.Kvs[0].Value); !strings.HasPrefix(v, `{"owner":"ours",`) || !strings.Contains(v, `"value":"10.0.0.1:80"}`+"\n") {
		t.Fatalf("concurrency.Election's Leader value %q, want our label and owner", v)
	}

	next := newElection()
	var ours atomic.Bool
	ours.Store(true)
	campaigned := make(chan error, 1)
	go func() {
		err := next.Campaign(ctx, "10.0.0.10:80")
		if err == nil && ours.Load() {
			err = errors.New("concurrency.Election won while Campaign led")
		}
		campaigned <- err
	}()
	queued(t, c, d, "svc", 2)
	ours.Store(false)
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-campaigned; err != nil {
		t.Fatal(err)
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
