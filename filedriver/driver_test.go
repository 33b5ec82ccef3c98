package filedriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/distlock/lock/driver"
)

func TestTwoClientsInOneProcessExcludeEachOther(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	a := newReq("k", "a")
	mustAcquire(t, d1, a)
	ctx := testCtx(t)
	if _, err := d2.TryAcquire(ctx, newReq("k", "b")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("second driver: got %v, want ErrLocked", err)
	}
	if _, err := d1.TryAcquire(ctx, newReq("k", "c")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("second owner on the same driver: got %v, want ErrLocked", err)
	}
	if err := d1.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, d2, newReq("k", "b"))
}

func TestTokensStartAtOneAndIncreaseAcrossClientsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	var last uint64
	for i := 0; i < 3; i++ {
		d, err := New(dir) // a fresh client each time, as a restarted process would be
		if err != nil {
			t.Fatal(err)
		}
		tok := mustAcquire(t, d, newReq("k", "o"))
		if i == 0 && tok != 1 {
			t.Fatalf("first token %d, want 1", tok)
		}
		if tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = tok
		if i%2 == 0 {
			if err := d.Release(ctx, newReq("k", "o")); err != nil {
				t.Fatal(err)
			}
		}
		d.Close() // the second time, the lock is dropped by Close
	}
	d := newDriver(t, dir)
	if tok := mustAcquire(t, d, newReq("other", "o")); tok != 1 {
		t.Fatalf("another key's first token %d, want 1", tok)
	}
}

func TestRetriedTryAcquireByHolderReturnsSameGrant(t *testing.T) {
	d := newDriver(t, t.TempDir())
	r := newReq("k", "o")
	first := mustAcquire(t, d, r)
	if again := mustAcquire(t, d, r); again != first {
		t.Fatalf("retry got token %d, want the same %d", again, first)
	}
}

func TestReleaseByStaleHolderKeepsNewOwnersLock(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	old := newReq("k", "old")
	mustAcquire(t, d1, old)
	if err := d1.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, d2, newReq("k", "new"))
	if err := d1.Release(ctx, old); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("stale release: got %v, want ErrNotHeld", err)
	}
	if err := d1.Refresh(ctx, old); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("stale refresh: got %v, want ErrNotHeld", err)
	}
	if _, err := d1.TryAcquire(ctx, newReq("k", "third")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("new owner's lock is gone: got %v, want ErrLocked", err)
	}
}

func TestDeletedOrReplacedLockFileIsNotHeld(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			d1, d2 := newDriver(t, dir), newDriver(t, dir)
			ctx := testCtx(t)
			r := newReq("k", "o")
			mustAcquire(t, d1, r)
			path := d1.path("k")
			if how == "deleted" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				tmp := filepath.Join(d1.Dir(), "tmp")
				if err := os.WriteFile(tmp, []byte("41\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
			// Another process can lock the new file: the cause the package
			// documents is a takeover.
			if err := d1.Refresh(ctx, r); !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrTakenOver) {
				t.Fatalf("refresh: got %v, want ErrNotHeld and ErrTakenOver", err)
			}
			if err := d1.Release(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("release after the loss: got %v, want ErrNotHeld", err)
			}
			mustAcquire(t, d2, newReq("k", "next"))
		})
	}
}

func TestReleaseOfReplacedLockFileReportsNotHeld(t *testing.T) {
	d := newDriver(t, t.TempDir())
	r := newReq("k", "o")
	mustAcquire(t, d, r)
	if err := os.Remove(d.path("k")); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(testCtx(t), r); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("got %v, want ErrNotHeld", err)
	}
}

func TestSeverFreesLocksAndHolderLearnsAtRefresh(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	r := newReq("k", "o")
	tok := mustAcquire(t, d1, r)
	d1.Sever()
	if next := mustAcquire(t, d2, newReq("k", "p")); next <= tok {
		t.Fatalf("token %d after severed %d", next, tok)
	}
	if err := d1.Refresh(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("refresh after sever: got %v, want ErrNotHeld", err)
	}
	if err := d1.Release(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release after sever: got %v, want ErrNotHeld", err)
	}
}

func TestCloseReleasesHeldLocksAndLaterCallsFail(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	ctx := testCtx(t)
	r := newReq("k", "o")
	mustAcquire(t, d1, r)
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, d2, newReq("k", "p"))
	if _, err := d1.TryAcquire(ctx, newReq("x", "o")); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("TryAcquire after Close: %v", err)
	}
	if err := d1.Refresh(ctx, r); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Refresh after Close: %v", err)
	}
	if err := d1.Release(ctx, r); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Release after Close: %v", err)
	}
	if err := d1.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCorruptCounterIsRefusedAndLeftUntouched(t *testing.T) {
	d := newDriver(t, t.TempDir())
	path := d.path("k")
	const junk = "not a counter\n"
	if err := os.WriteFile(path, []byte(junk), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := d.TryAcquire(testCtx(t), newReq("k", "o"))
	if err == nil || !strings.Contains(err.Error(), "fencing counter") {
		t.Fatalf("got %v, want a fencing counter error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != junk {
		t.Fatalf("file rewritten to %q", b)
	}
	// The failed attempt left the lock free.
	if err := os.WriteFile(path, []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tok := mustAcquire(t, d, newReq("k", "o")); tok != 8 {
		t.Fatalf("token %d after counter 7, want 8", tok)
	}
}

func TestSymlinkedLockFileIsRefused(t *testing.T) {
	d := newDriver(t, t.TempDir())
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, d.path("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryAcquire(testCtx(t), newReq("k", "o")); err == nil {
		t.Fatal("acquired through a symbolic link")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim rewritten to %q", b)
	}
}

func TestTrickyKeysAreDistinctLocks(t *testing.T) {
	d := newDriver(t, t.TempDir())
	for i, k := range trickyKeys {
		if tok := mustAcquire(t, d, newReq(k, "o")); tok != 1 {
			t.Fatalf("key %d (%q) got token %d: it shares a file with an earlier key", i, k, tok)
		}
	}
	ents, err := os.ReadDir(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	// Each held key has its lock file and its holders directory, and nothing
	// else is there.
	var files, dirs int
	for _, e := range ents {
		switch {
		case e.Type().IsRegular() && strings.HasSuffix(e.Name(), lockSuffix):
			files++
		case e.IsDir() && strings.HasSuffix(e.Name(), lockSuffix+holdersSuffix):
			dirs++
		default:
			t.Errorf("unexpected entry %q", e.Name())
		}
	}
	if files != len(trickyKeys) || dirs != len(trickyKeys) {
		t.Fatalf("%d lock files and %d holders directories for %d keys", files, dirs, len(trickyKeys))
	}
	if outside, _ := os.ReadDir(filepath.Dir(d.Dir())); len(outside) != 1 {
		t.Fatalf("files outside the prefix directory: %v", outside)
	}
}

func TestMutualExclusionUnderContention(t *testing.T) {
	dir := t.TempDir()
	const clients, rounds = 4, 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  int
		granted int
	)
	for c := 0; c < clients; c++ {
		c, d := c, newDriver(t, dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			for i := 0; i < rounds; {
				r := newReq("hot", fmt.Sprint("owner", c, i))
				if _, err := d.TryAcquire(ctx, r); errors.Is(err, driver.ErrLocked) {
					continue
				} else if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				if inside != 1 {
					t.Errorf("%d holders at once", inside)
				}
				mu.Unlock()
				runtime.Gosched() // let a second holder, if there were one, come in
				mu.Lock()
				inside--
				granted++
				mu.Unlock()
				if err := d.Release(ctx, r); err != nil {
					t.Error(err)
					return
				}
				i++
			}
		}()
	}
	wg.Wait()
	d := newDriver(t, dir)
	if tok := mustAcquire(t, d, newReq("hot", "last")); tok != uint64(granted)+1 {
		t.Fatalf("token %d after %d grants: tokens were skipped or repeated", tok, granted)
	}
}
