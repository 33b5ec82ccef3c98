package filedriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
)

// Besides its lock file, a key used as a read-write lock or a semaphore has
// companion files, named by the lock file's name plus a suffix. Lock file names
// end in ".lock", so a companion name never equals another key's lock file.
const (
	// intentSuffix names the writer-intent file: an exclusive Acquire that has
	// to wait holds it exclusively while it waits, and a shared request passes
	// it (takes and drops a shared flock) before it asks for the lock file.
	intentSuffix = ".w"
	// guardSuffix names the counter guard: shared and permit holders hold the
	// lock file together, so each bumps the fencing counter in it under a brief
	// exclusive flock of the guard.
	guardSuffix = ".g"
	// permitsSuffix names a semaphore's permits file: it holds n, and every
	// permit holder and waiter keeps a shared flock on it.
	permitsSuffix = ".n"
	// slotSuffix, followed by 1..n, names a semaphore's slot files: a permit
	// is an exclusive flock on one of them.
	slotSuffix = ".s"
	// queueSuffix names a semaphore's queue directory, where waiting permit
	// requests line up (see queue_linux.go).
	queueSuffix = ".q"
)

// MaxPermits is the largest semaphore the driver offers: the waiting permit
// request at the head of the queue tries every slot file each time a permit
// is given back, so the cost of a wake-up grows with n.
const MaxPermits = 1024

// tryShared makes one attempt at a shared lock: it passes the intent file,
// unless an exclusive request is waiting there, then takes a shared flock on
// the lock file.
func (d *Driver) tryShared(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	return retryReplaced(func() (driver.Grant, error) {
		path := d.path(req.Key)
		gate, _, err := tryLock(path+intentSuffix, lockSh)
		if err != nil {
			return driver.Grant{}, err // ErrLocked: a writer waits, and we arrived after it
		}
		gate.Close()
		f, start, err := tryLock(path, lockSh)
		if err != nil {
			return driver.Grant{}, err
		}
		return d.grantGuarded(ctx, req, &holding{f: f, path: path, start: start}, kindShared)
	})
}

// retryReplaced runs attempt again, at most maxReplaced times, while it finds
// that ForceRelease replaced the files it locked (errReplaced).
func retryReplaced(attempt func() (driver.Grant, error)) (driver.Grant, error) {
	for i := 0; ; i++ {
		g, err := attempt()
		if !errors.Is(err, errReplaced) || i == maxReplaced {
			return g, err
		}
	}
}

// tryPermit makes one attempt at a permit: it joins the semaphore (checking
// its number of permits), takes a free slot, then a shared flock on the lock
// file, in which the token is counted.
func (d *Driver) tryPermit(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := checkPermits(req.Permits); err != nil {
		return driver.Grant{}, err
	}
	return retryReplaced(func() (driver.Grant, error) {
		path := d.path(req.Key)
		meta, err := d.joinSemaphore(ctx, path+permitsSuffix, req.Permits)
		if err != nil {
			return driver.Grant{}, err
		}
		slot, slotPath, start, err := trySlots(path, req.Permits)
		if err != nil {
			meta.Close()
			return driver.Grant{}, err
		}
		f, _, err := tryLock(path, lockSh)
		if err != nil { // an exclusive holder: the key is also used as a lock
			slot.Close()
			meta.Close()
			return driver.Grant{}, err
		}
		h := &holding{f: slot, path: slotPath, extra: []*os.File{f, meta}, start: start}
		return d.grantGuarded(ctx, req, h, kindPermit)
	})
}

func checkPermits(n int) error {
	if n > MaxPermits {
		return fmt.Errorf("%w: filedriver: a semaphore of %d permits; at most %d", driver.ErrUnsupported, n, MaxPermits)
	}
	return nil
}

// trySlots takes an exclusive flock on the first free slot file of the key's
// lock file path, and returns it, its path and when its flock was attempted;
// driver.ErrLocked if all n are taken.
func trySlots(path string, n int) (*os.File, string, time.Time, error) {
	for i := 1; i <= n; i++ {
		p := path + slotSuffix + strconv.Itoa(i)
		f, start, err := tryLock(p, lockEx)
		if err == nil {
			return f, p, start, nil
		}
		if !errors.Is(err, driver.ErrLocked) {
			return nil, "", time.Time{}, err
		}
	}
	return nil, "", time.Time{}, driver.ErrLocked
}

// joinSemaphore returns the permits file at path open with a shared flock,
// after checking that it holds n. Whoever finds nobody else in the file (an
// exclusive flock succeeds) writes n first, so the number is that of the
// current users; a different number there is driver.ErrInvalidArgument.
func (d *Driver) joinSemaphore(ctx context.Context, path string, n int) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		f, err := openLockFile(path)
		if err != nil {
			return nil, err
		}
		got, err := d.enterPermits(ctx, f, n)
		if err != nil {
			f.Close()
			return nil, err
		}
		if got == n {
			return f, nil
		}
		f.Close()
		// The users of the other number may have just left (the downgrade
		// from exclusive to shared is not atomic, either): look again before
		// calling it a mismatch.
		if attempt == 2 {
			return nil, fmt.Errorf("%w: filedriver: the key is in use as a semaphore of %d permits, not %d", driver.ErrInvalidArgument, got, n)
		}
	}
}

// enterPermits takes a shared flock on the permits file f, having written n
// into it if nobody else had it, and returns the number it holds.
func (d *Driver) enterPermits(ctx context.Context, f *os.File, n int) (int, error) {
	switch err := flockNB(f, lockEx); {
	case err == nil:
		out := strconv.AppendInt(nil, int64(n), 10)
		out = append(out, '\n')
		if _, err := f.WriteAt(out, 0); err != nil {
			return 0, fmt.Errorf("filedriver: write permits file: %w", err)
		}
		if err := f.Truncate(int64(len(out))); err != nil {
			return 0, fmt.Errorf("filedriver: write permits file: %w", err)
		}
	case !errors.Is(err, driver.ErrLocked):
		return 0, err
	}
	if err := d.lockBriefly(ctx, f, lockSh); err != nil {
		return 0, err
	}
	var buf [maxCounterLen]byte
	m, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("filedriver: read permits file: %w", err)
	}
	got, err := strconv.Atoi(strings.TrimSpace(string(buf[:m])))
	if err != nil {
		return 0, nil // not written yet (its writer died first): count it as a mismatch, retried
	}
	return got, nil
}

// grantGuarded bumps the fencing counter in the key's lock file (which h, of
// kind, holds flocked shared: see keyFile) under the key's counter guard, and
// records h.
// Exclusive holders bump it under their exclusive flock instead, which the
// shared flock of h excludes, so every bump of a key's counter is alone.
//
// Still under the guard, which ForceRelease holds while it replaces the
// key's files, it publishes h's holder file and checks that the files h
// locked are still the ones at their paths: so either ForceRelease finds h's
// holder file and evicts h, or h finds its files replaced (errReplaced, and
// the token is never handed out).
func (d *Driver) grantGuarded(ctx context.Context, req *driver.Request, h *holding, kind string) (driver.Grant, error) {
	if err := d.guarded(ctx, req, h, kind); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	return d.grant(req, h)
}

// keyFile is the key's lock file that h, of kind, holds flocked shared: h.f
// for a reader, the first of h.extra for a permit (whose h.f is its slot).
func (h *holding) keyFile(kind string) *os.File {
	if kind == kindPermit {
		return h.extra[0]
	}
	return h.f
}

func (d *Driver) guarded(ctx context.Context, req *driver.Request, h *holding, kind string) error {
	counter, path := h.keyFile(kind), d.path(req.Key)
	if d.testHookGranting != nil {
		d.testHookGranting(req.Key)
	}
	g, err := openLockFile(path + guardSuffix)
	if err != nil {
		return err
	}
	defer g.Close()
	if err := d.lockBriefly(ctx, g, lockEx); err != nil {
		return err
	}
	if h.token, err = nextToken(counter); err != nil {
		return err
	}
	if err := d.publish(ctx, req, h, kind); err != nil {
		return err
	}
	if err := checkSame(counter, path); err != nil {
		return err
	}
	if h.f != counter {
		return checkSame(h.f, h.path)
	}
	return nil
}

// lockBriefly flocks f in mode, retrying after short pauses while another
// descriptor holds a conflicting lock. It is only for the flocks that are held
// for a moment (the counter guard while a token is written, the permits file
// while n is written), which are not worth a watch.
func (d *Driver) lockBriefly(ctx context.Context, f *os.File, mode int) error {
	return d.lockWhile(ctx, f, mode, nil)
}

// lockWhile is lockBriefly that also gives up with check's error, which it
// calls before each pause.
func (d *Driver) lockWhile(ctx context.Context, f *os.File, mode int, check func() error) error {
	pause := 20 * time.Microsecond
	var t *time.Timer
	for {
		err := flockNB(f, mode)
		if !errors.Is(err, driver.ErrLocked) {
			return err
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if t == nil {
			t = time.NewTimer(pause)
			defer t.Stop()
		} else {
			t.Reset(pause)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.held.Done():
			return driver.ErrClosed
		case <-t.C:
		}
		pause = min(2*pause, time.Millisecond)
	}
}
