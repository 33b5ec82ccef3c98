//go:build linux

package filedriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

func labelled(key, owner, label string) *driver.Request {
	r := newReq(key, owner)
	r.Label = label
	return r
}

func inspect(t *testing.T, d *Driver, key string) driver.Info {
	t.Helper()
	in, err := d.Inspect(testCtx(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return in
}

// holderFiles lists the names in key's holders directory.
func holderFiles(t *testing.T, d *Driver, key string) []string {
	t.Helper()
	ents, err := os.ReadDir(d.path(key) + holdersSuffix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestHolderFileIsPublishedWhileHeldAndLetGoOnRelease(t *testing.T) {
	d := newDriver(t, t.TempDir())
	ctx := testCtx(t)
	r := labelled("k", "a1", `{"owner":"web-1"}`)
	tok := mustAcquire(t, d, r)
	b, err := os.ReadFile(filepath.Join(d.path("k")+holdersSuffix, exclusiveName))
	if err != nil {
		t.Fatalf("holder file: %v", err)
	}
	hi, ok := parseHolder(b)
	if !ok || hi.token != tok || hi.kind != kindExclusive || hi.id != "a1" || hi.key != "k" || hi.label != `{"owner":"web-1"}` {
		t.Fatalf("holder file %q parses as %+v, %v", b, hi, ok)
	}
	in := inspect(t, d, "k")
	want := []driver.Holder{{Owner: "a1", Label: `{"owner":"web-1"}`, Token: tok}}
	if !slices.Equal(in.Holders, want) || in.Token != tok || in.Waiters != 0 || in.Permits != 0 {
		t.Fatalf("Inspect = %+v, want holders %+v, token %d", in, want, tok)
	}
	if err := d.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	if in := inspect(t, d, "k"); len(in.Holders) != 0 || in.Token != tok {
		t.Fatalf("Inspect after the release = %+v, want no holder and token %d", in, tok)
	}
	// The exclusive holder file stays for the next holder; a shared one goes.
	s := labelled("k", "s1", "")
	s.Shared = true
	mustAcquire(t, d, s)
	if names := holderFiles(t, d, "k"); !slices.Equal(names, []string{exclusiveName, sharedPrefix + "s1"}) {
		t.Fatalf("holder files with a shared holder: %q", names)
	}
	if err := d.Release(ctx, s); err != nil {
		t.Fatal(err)
	}
	if names := holderFiles(t, d, "k"); !slices.Equal(names, []string{exclusiveName}) {
		t.Fatalf("holder files after the releases: %q", names)
	}
}

func TestInspectReportsSharedAndPermitHoldersAndListFindsLongKeys(t *testing.T) {
	dir := t.TempDir()
	d, other := newDriver(t, dir), newDriver(t, dir)
	long := strings.Repeat("ключ/", 100) // hashed file name: List must read the key back
	for i, r := range []*driver.Request{labelled("rw", "s1", "x"), labelled("rw", "s2", "y")} {
		r.Shared = true
		if _, err := []*Driver{d, other}[i].TryAcquire(testCtx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	in := inspect(t, d, "rw")
	if len(in.Holders) != 2 || !in.Holders[0].Shared || !in.Holders[1].Shared || in.Holders[0].Token >= in.Holders[1].Token || in.Token != in.Holders[1].Token {
		t.Fatalf("two shared holders: %+v", in)
	}
	for _, o := range []string{"p1", "p2"} {
		r := labelled("sem", o, o)
		r.Permits = 3
		if _, err := d.TryAcquire(testCtx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	in = inspect(t, d, "sem")
	if len(in.Holders) != 2 || in.Holders[0].Shared || in.Permits != 3 {
		t.Fatalf("two of three permits: %+v", in)
	}
	mustAcquire(t, other, newReq(long, "l"))
	got, err := d.List(testCtx(t), "")
	if want := []string{"rw", "sem", long}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %q, %v; want %q", got, err, want)
	}
	if got, err := d.List(testCtx(t), "ключ/"); err != nil || !slices.Equal(got, []string{long}) {
		t.Fatalf("List(ключ/) = %q, %v", got, err)
	}
}

func TestInspectCountsWaitersUntilTheyLeave(t *testing.T) {
	dir := t.TempDir()
	d, w := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(w)
	r := newReq("k", "h")
	mustAcquire(t, d, r)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	results := make(chan error, 2)
	for _, o := range []string{"w1", "w2"} {
		wctx := ctx
		if o == "w1" {
			var c context.CancelFunc
			wctx, c = context.WithCancel(ctx)
			defer c()
			go func() { <-blocked; <-blocked; c() }() // cancel w1 once both have blocked
		}
		go func() {
			_, err := w.Acquire(wctx, newReq("k", o))
			results <- err
		}()
	}
	if err := waitFor(t, results, "the cancelled waiter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	deadline := time.Now().Add(watchdog)
	for inspect(t, d, "k").Waiters != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Waiters %d with one waiter left", inspect(t, d, "k").Waiters)
		}
		time.Sleep(time.Millisecond)
	}
	if err := d.Release(testCtx(t), r); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, results, "the second waiter"); err != nil {
		t.Fatal(err)
	}
	if in := inspect(t, d, "k"); in.Waiters != 0 || len(in.Holders) != 1 || in.Holders[0].Owner != "w2" {
		t.Fatalf("Inspect after the hand-over: %+v", in)
	}
}

func TestHolderFilesOfAKilledProcessAreSkippedAndRemoved(t *testing.T) {
	for _, permits := range []string{"", "2"} {
		t.Run("permits="+permits, func(t *testing.T) {
			dir := t.TempDir()
			var env []string
			if permits != "" {
				env = append(env, childPermitsEnv+"="+permits)
			}
			child, tok := startHolder(t, dir, "job", env...)
			d := newDriver(t, dir)
			in := inspect(t, d, "job")
			if len(in.Holders) != 1 || in.Holders[0].Token != tok || !strings.Contains(in.Holders[0].Label, `"owner"`) {
				t.Fatalf("Inspect of the child's lock: %+v", in)
			}
			if keys, err := d.List(testCtx(t), ""); err != nil || !slices.Equal(keys, []string{"job"}) {
				t.Fatalf("List = %q, %v", keys, err)
			}
			before := holderFiles(t, d, "job")
			child.kill(t)
			waitFor(t, child.exited, "the holder to exit")
			if keys, err := d.List(testCtx(t), ""); err != nil || len(keys) != 0 {
				t.Fatalf("List after the holder was killed = %q, %v", keys, err)
			}
			if in := inspect(t, d, "job"); len(in.Holders) != 0 || in.Token != tok {
				t.Fatalf("Inspect after the holder was killed: %+v", in)
			}
			// A permit holder's file is removed; the exclusive one stays.
			after := holderFiles(t, d, "job")
			if permits != "" && (len(before) != 1 || len(after) != 0) || permits == "" && !slices.Equal(after, []string{exclusiveName}) {
				t.Fatalf("holder files %q while held, %q after the holder was killed", before, after)
			}
		})
	}
}

func TestForceReleaseTellsTheHolderAndTokensContinue(t *testing.T) {
	dir := t.TempDir()
	d, op, next := newDriver(t, dir), newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	if _, err := op.ForceRelease(ctx, "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a key never used: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 { // just the prefix directory
		t.Fatalf("ForceRelease of a key never used left %v", ents)
	}
	a := newReq("k", "a")
	tok := mustAcquire(t, d, a)
	if n, err := op.ForceRelease(ctx, "k"); n != 1 || err != nil {
		t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
	}
	if names := holderFiles(t, d, "k"); !slices.Equal(names, []string{evictedPrefix + "a"}) {
		t.Fatalf("holders directory after the eviction: %q, want the tombstone", names)
	}
	if in := inspect(t, op, "k"); len(in.Holders) != 0 || in.Token != tok {
		t.Fatalf("Inspect after the eviction: %+v", in)
	}
	if _, err := op.ForceRelease(ctx, "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease again: %v, want ErrNotHeld", err)
	}
	b := newReq("k", "b")
	if got := mustAcquire(t, next, b); got != tok+1 {
		t.Fatalf("token %d after the evicted %d", got, tok)
	}
	if err := d.Relabel(ctx, a, "x"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by the evicted holder: %v", err)
	}
	err := d.Refresh(ctx, a)
	if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrForceReleased) {
		t.Fatalf("the evicted holder's Refresh: %v, want ErrNotHeld and ErrForceReleased", err)
	}
	if names := holderFiles(t, d, "k"); !slices.Equal(names, []string{exclusiveName}) {
		t.Fatalf("holders directory after the evicted holder learnt it: %q", names)
	}
	if err := d.Release(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the evicted holder's Release: %v", err)
	}
	if _, err := d.TryAcquire(ctx, newReq("k", "c")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("the new holder's lock after the evicted holder let go: %v, want ErrLocked", err)
	}
}

// A tombstone lives kit.TombstoneLife of an unknown TTL, even while its
// holder keeps it flocked: after that, scan removes it, and the holder that
// never refreshed learns only that its lock is gone.
func TestTombstoneEndsAfterItsLife(t *testing.T) {
	dir := t.TempDir()
	d, op := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	a := newReq("k", "a")
	mustAcquire(t, d, a)
	if n, err := op.ForceRelease(ctx, "k"); n != 1 || err != nil {
		t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
	}
	stone := filepath.Join(d.path("k")+holdersSuffix, evictedPrefix+"a")
	fi, err := os.Lstat(stone)
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(fi.ModTime()); age > time.Minute {
		t.Fatalf("the tombstone's time is %v old; want the eviction's", age)
	}
	inspect(t, op, "k") // young: kept
	if names := holderFiles(t, d, "k"); !slices.Equal(names, []string{evictedPrefix + "a"}) {
		t.Fatalf("holders directory after Inspect of a young tombstone: %q", names)
	}
	old := time.Now().Add(-tombstoneLife - time.Second)
	if err := os.Chtimes(stone, old, old); err != nil {
		t.Fatal(err)
	}
	inspect(t, op, "k")
	if names := holderFiles(t, d, "k"); len(names) != 0 {
		t.Fatalf("holders directory after Inspect of an expired tombstone: %q, want none", names)
	}
	err = d.Refresh(ctx, a)
	if !errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrForceReleased) {
		t.Fatalf("Refresh after the tombstone expired: %v, want ErrNotHeld only", err)
	}
}

func TestReplacedLockFileIsALossButNotAForcedRelease(t *testing.T) {
	d := newDriver(t, t.TempDir())
	r := newReq("k", "o")
	mustAcquire(t, d, r)
	tmp := filepath.Join(d.Dir(), "tmp")
	if err := os.WriteFile(tmp, []byte("41\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, d.path("k")); err != nil {
		t.Fatal(err)
	}
	err := d.Refresh(testCtx(t), r)
	if !errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrForceReleased) {
		t.Fatalf("Refresh after an operator replaced the file: %v, want ErrNotHeld only", err)
	}
}

func TestRelabelRewritesOnlyTheOwnersLabel(t *testing.T) {
	dir := t.TempDir()
	d, other := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	r := labelled("k", "o", "first")
	mustAcquire(t, d, r)
	if err := other.Relabel(ctx, newReq("k", "o"), "stolen"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel from a client that does not hold it: %v", err)
	}
	if err := d.Relabel(ctx, newReq("k", "p"), "stolen"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by another owner: %v", err)
	}
	for _, l := range []string{"a much longer second label", "3"} { // longer, then shorter
		if err := d.Relabel(ctx, r, l); err != nil {
			t.Fatal(err)
		}
		if in := inspect(t, other, "k"); len(in.Holders) != 1 || in.Holders[0].Label != l {
			t.Fatalf("after Relabel(%q): %+v", l, in)
		}
	}
}

// pauseGranting makes d's requests stop after flocking, before taking a
// token, until the returned function is called; paused reports each stop.
func pauseGranting(d *Driver) (paused <-chan struct{}, resume func()) {
	p, gate := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	d.testHookGranting = func(string) {
		p <- struct{}{}
		<-gate
	}
	return p, func() { once.Do(func() { close(gate) }) }
}

// A request that flocked the key's files just before ForceRelease replaced
// them never holds them beside the new files' holder: it finds them
// replaced once it has taken its token, and starts again on the new files.
func TestRequestOnTheReplacedFilesNeverHoldsBesideTheNewHolder(t *testing.T) {
	type shape struct {
		name  string
		apply func(*driver.Request)
	}
	exclusive := func(*driver.Request) {}
	shared := func(r *driver.Request) { r.Shared = true }
	permit := func(r *driver.Request) { r.Permits = 2 }
	for _, sh := range []shape{{"exclusive", exclusive}, {"shared", shared}, {"permit", permit}} {
		t.Run(sh.name, func(t *testing.T) {
			dir := t.TempDir()
			late, op, rival := newDriver(t, dir), newDriver(t, dir), newDriver(t, dir)
			ctx := testCtx(t)
			paused, resume := pauseGranting(late)
			defer resume()
			var rivals []*driver.Request
			if sh.name == "permit" { // one permit held before, so both new ones are needed to exclude
				first := newReq("k", "first")
				permit(first)
				mustAcquire(t, rival, first)
			}
			lr := newReq("k", "late")
			sh.apply(lr)
			got := make(chan error, 1)
			go func() {
				_, err := late.TryAcquire(ctx, lr)
				got <- err
			}()
			waitFor(t, paused, "the late request to flock the old files")
			if _, err := op.ForceRelease(ctx, "k"); err != nil {
				t.Fatalf("ForceRelease: %v", err)
			}
			// The rival takes the new files whole: the exclusive lock, or both permits.
			var top uint64
			for i := 0; i < 1+btoi(sh.name == "permit"); i++ {
				r := newReq("k", fmt.Sprint("rival", i))
				if sh.name == "permit" {
					permit(r)
				}
				top = max(top, mustAcquire(t, rival, r))
				rivals = append(rivals, r)
			}
			resume()
			if err := waitFor(t, got, "the late request"); !errors.Is(err, driver.ErrLocked) {
				t.Fatalf("the late request on the replaced files: %v, want ErrLocked while the rival holds the new ones", err)
			}
			in := inspect(t, op, "k")
			for _, h := range in.Holders {
				if h.Owner == "late" {
					t.Fatalf("the late request shows as a holder: %+v", in)
				}
			}
			for _, r := range rivals {
				if err := rival.Release(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if tok := mustAcquire(t, late, lr); tok <= top {
				t.Fatalf("the late request's token %d after the rival's %d", tok, top)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Waiters blocked on a lock file when ForceRelease replaces it move to the
// new file: they take turns with a newcomer, one at a time, also after the
// evicted holder lets the old file go, and with tokens above the evicted one.
func TestWaitersBlockedOnTheReplacedFileTakeTurnsOnTheNewOne(t *testing.T) {
	dir := t.TempDir()
	holder, op := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	a := newReq("k", "a")
	evictedToken := mustAcquire(t, holder, a)
	var (
		mu      sync.Mutex
		inside  int
		tokens  []uint64
		wg      sync.WaitGroup
		first   sync.Once
		granted = make(chan struct{})
	)
	start := func(d *Driver, owner string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newReq("k", owner)
			g, err := d.Acquire(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			if inside != 1 {
				t.Errorf("%d holders at once besides the evicted one", inside)
			}
			tokens = append(tokens, g.Token)
			mu.Unlock()
			first.Do(func() { close(granted) })
			time.Sleep(time.Millisecond) // the holder's work, not an ordering
			mu.Lock()
			inside--
			mu.Unlock()
			if err := d.Release(ctx, r); err != nil {
				t.Error(err)
			}
		}()
	}
	const waiters = 3
	for i := 0; i < waiters; i++ {
		w := newDriver(t, dir)
		blocked := blockedHook(w)
		start(w, fmt.Sprint("w", i))
		waitFor(t, blocked, "a waiter to block on the old file")
	}
	if in := inspect(t, op, "k"); in.Waiters != waiters {
		t.Fatalf("Waiters %d, want %d", in.Waiters, waiters)
	}
	if _, err := op.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	start(newDriver(t, dir), "newcomer")
	// The waiters moved to the new file: one is granted it while the evicted
	// holder still has the old one.
	waitFor(t, granted, "a waiter to take the new lock file")
	if err := holder.Release(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the evicted holder's Release: %v", err)
	}
	wg.Wait()
	slices.Sort(tokens)
	if len(tokens) != waiters+1 || tokens[0] <= evictedToken || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
		t.Fatalf("tokens %v after the evicted %d: want %d distinct, all larger", tokens, evictedToken, waiters+1)
	}
}

// Under ForceRelease called again and again while clients take turns, no
// token is granted twice, and two grants overlap only when the earlier holder
// was evicted (its Release reports ErrNotHeld).
func TestForceReleaseUnderContentionNeverGrantsATokenTwiceNorOverlapsLiveHolders(t *testing.T) {
	dir := t.TempDir()
	op := newDriver(t, dir)
	type grant struct {
		token            uint64
		granted, release time.Time
		shared, evicted  bool
	}
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
	)
	ctx := testCtx(t)
	const clients, rounds = 4, 40
	for c := 0; c < clients; c++ {
		d := newDriver(t, dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				r := newReq("hot", fmt.Sprint(c, "-", i))
				if c%2 == 1 {
					r.Shared = i%3 == 0 // some shared grants among the exclusive ones
				}
				g, err := d.Acquire(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				at := time.Now()
				runtime.Gosched()
				rel := time.Now()
				err = d.Release(ctx, r)
				if err != nil && !errors.Is(err, driver.ErrNotHeld) {
					t.Error(err)
				}
				mu.Lock()
				grants = append(grants, grant{g.Token, at, rel, r.Shared, err != nil})
				mu.Unlock()
			}
		}()
	}
	stop := make(chan struct{})
	evictions := 0
	var opDone sync.WaitGroup
	opDone.Add(1)
	go func() {
		defer opDone.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := op.ForceRelease(ctx, "hot"); err == nil {
				evictions++
			} else if !errors.Is(err, driver.ErrNotHeld) {
				t.Error(err)
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	wg.Wait()
	close(stop)
	opDone.Wait()
	t.Logf("%d grants, %d evictions", len(grants), evictions)
	seen := map[uint64]bool{}
	for _, g := range grants {
		if seen[g.token] {
			t.Errorf("token %d granted twice", g.token)
		}
		seen[g.token] = true
	}
	for _, x := range grants {
		for _, y := range grants {
			// Shared grants may overlap each other; any other overlap needs
			// the earlier holder to have been evicted.
			if x.token < y.token && y.granted.Before(x.release) && !x.evicted && !(x.shared && y.shared) {
				t.Errorf("token %d granted at %v while token %d, not evicted, held until %v", y.token, y.granted, x.token, x.release)
			}
		}
	}
}

// Each change of a key's holders is followed by a signal after which Inspect
// shows it: what Observe relies on.
func TestWatchSignalsEveryChangeOfHoldersAndClosesWithItsContext(t *testing.T) {
	dir := t.TempDir()
	d, op := newDriver(t, dir), newDriver(t, dir)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	ch, err := op.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	signalled := func(what string, shown func(driver.Info) bool) {
		t.Helper()
		deadline := time.After(watchdog)
		for {
			select {
			case <-ch:
				if shown(inspect(t, op, "job")) {
					return
				}
			case <-deadline:
				t.Fatalf("no signal after %s: Inspect shows %+v", what, inspect(t, op, "job"))
			}
		}
	}
	holders := func(n int) func(driver.Info) bool {
		return func(in driver.Info) bool { return len(in.Holders) == n }
	}
	r := labelled("job", "a", "one")
	mustAcquire(t, d, r)
	signalled("a grant", holders(1))
	if err := d.Relabel(testCtx(t), r, "two"); err != nil {
		t.Fatal(err)
	}
	signalled("a relabelling", func(in driver.Info) bool { return len(in.Holders) == 1 && in.Holders[0].Label == "two" })
	if err := d.Release(testCtx(t), r); err != nil {
		t.Fatal(err)
	}
	signalled("a release", holders(0))
	mustAcquire(t, d, newReq("job", "b"))
	signalled("a second grant", holders(1))
	if _, err := op.ForceRelease(testCtx(t), "job"); err != nil {
		t.Fatal(err)
	}
	signalled("an eviction", holders(0))
	child, _ := startHolder(t, dir, "job", childPermitsEnv+"=2")
	signalled("a permit grant in another process", holders(1))
	child.kill(t)
	signalled("the death of the permit holder's process", holders(0))
	cancel()
	deadline := time.After(watchdog)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Watch's channel still open after its context ended")
		}
	}
}

// flock(1) on a lock file still excludes and is excluded with holder files
// beside it, and a flock(1) blocked in the kernel counts as a waiter.
func TestFlockCommandOnTheLockFileExcludesAndCountsAsAWaiter(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) command:", err)
	}
	d := newDriver(t, t.TempDir())
	ctx := testCtx(t)
	r := newReq("k", "o")
	tok := mustAcquire(t, d, r)
	if err := exec.Command(flock, "-n", d.path("k"), "true").Run(); err == nil {
		t.Fatal("flock -n took the lock file while the driver held it")
	}
	if err := d.Release(ctx, r); err != nil {
		t.Fatal(err)
	}

	holder := exec.Command(flock, d.path("k"), "-c", "echo held; cat >/dev/null")
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = holder.Process.Kill(); _ = holder.Wait() }()
	line := make([]byte, 5)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "held\n" {
		t.Fatalf("flock(1) printed %q, %v", line, err)
	}
	if _, err := d.TryAcquire(ctx, newReq("k", "p")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("TryAcquire while flock(1) holds the lock file: %v, want ErrLocked", err)
	}
	waiter := exec.Command(flock, d.path("k"), "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waiter.Process.Kill(); _ = waiter.Wait() }()
	deadline := time.Now().Add(watchdog)
	for inspect(t, d, "k").Waiters != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Inspect with flock(1) blocked on the lock file: %+v, want one waiter", inspect(t, d, "k"))
		}
		time.Sleep(time.Millisecond)
	}
	in.Close()
	if err := holder.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := mustAcquire(t, d, newReq("k", "q")); got != tok+1 {
		t.Fatalf("token %d after flock(1) used the file; want %d", got, tok+1)
	}
}

// Shared and permit requests blocked when ForceRelease replaces the key's
// files are woken at once and granted the new ones, with larger tokens.
func TestBlockedSharedAndPermitWaitersAreGrantedPromptlyAfterForceRelease(t *testing.T) {
	for _, permits := range []int{0, 2} {
		t.Run(fmt.Sprint("permits=", permits), func(t *testing.T) {
			dir := t.TempDir()
			holder, op, w := newDriver(t, dir), newDriver(t, dir), newDriver(t, dir)
			blocked := blockedHook(w)
			var held []uint64
			if permits == 0 {
				held = append(held, mustAcquire(t, holder, newReq("k", "x"))) // a writer holds it
			} else {
				for _, o := range []string{"p1", "p2"} {
					r := newReq("k", o)
					r.Permits = permits
					held = append(held, mustAcquire(t, holder, r))
				}
			}
			r := newReq("k", "w")
			r.Shared, r.Permits = permits == 0, permits
			got := goAcquire(testCtx(t), w, r)
			waitFor(t, blocked, "the request to block")
			evicted := time.Now()
			if _, err := op.ForceRelease(testCtx(t), "k"); err != nil {
				t.Fatal(err)
			}
			res := waitFor(t, got, "the blocked request")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if lat := res.at.Sub(evicted); lat > promptWake {
				t.Errorf("granted %v after the eviction, want within %v", lat, promptWake)
			}
			if res.g.Token <= slices.Max(held) {
				t.Errorf("token %d after the evicted holders' %v", res.g.Token, held)
			}
		})
	}
}
