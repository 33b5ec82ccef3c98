//go:build linux

package filedriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// On Linux a waiting Acquire keeps its own descriptor on the lock file open and
// watches the file with inotify. The kernel reports every close of a descriptor
// on the file, and both ways a lock ends are closes: a release closes the holder's
// descriptor, and a dying process's descriptors are closed by the kernel. So a
// waiter retries its flock when a close is reported, instead of polling. Keeping
// its descriptor open matters: were each retry to open and close the file, every
// waiter would wake every other for ever.
const notifySupported = true

const (
	// watchMask: a close of any descriptor on the file (a possible release), and a
	// change of its links (deleted or replaced: the waiter must reopen the path).
	watchMask = syscall.IN_CLOSE_WRITE | syscall.IN_CLOSE_NOWRITE | syscall.IN_ATTRIB |
		syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_DONT_FOLLOW

	// fallbackRecheck is the belt-and-braces retry of a watched waiter, in case an
	// event was lost; it is not how waiters normally wake.
	fallbackRecheck = 500 * time.Millisecond

	// pollRecheck is the retry interval of a waiter that could not get a watch
	// (inotify limits reached), which must poll.
	pollRecheck = 25 * time.Millisecond
)

// settleRechecks: the kernel queues the close event just before it drops the
// closed descriptor's flock (fsnotify_close precedes locks_remove_file in
// __fput), so a waiter woken fast can still find the lock taken, in about one
// handoff out of several hundred. It then tries again after each of these delays
// before falling back to fallbackRecheck.
var settleRechecks = [...]time.Duration{100 * time.Microsecond, time.Millisecond, 10 * time.Millisecond}

var _ driver.Acquirer = (*Driver)(nil)

// Acquire blocks until req.Owner holds req.Key in the shape req asks for, ctx
// is done (it returns ctx.Err()) or the driver is closed (driver.ErrClosed).
// It is woken by inotify when a descriptor on the file it waits for is closed,
// so it takes the lock within moments of a release or a holder's death. When
// it returns an error it leaves no descriptor or watch behind.
func (d *Driver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if g, ok, err := d.heldBy(req); ok || err != nil {
		return g, err
	}
	// The request shows in Inspect's Waiters from the first time it blocks
	// until it returns.
	w := &waiting{d: d, key: req.Key, owner: req.Owner}
	defer w.done()
	for {
		var (
			g   driver.Grant
			err error
		)
		switch {
		case req.Permits > 1:
			g, err = d.acquirePermit(ctx, req, w)
		case req.Shared:
			g, err = d.acquireShared(ctx, req, w)
		default:
			g, err = d.acquireExclusive(ctx, req, w)
		}
		// errReplaced: ForceRelease replaced the files we locked before we
		// could hold them; start again on the new ones.
		if !errors.Is(err, errReplaced) {
			return g, err
		}
	}
}

func (d *Driver) acquireExclusive(ctx context.Context, req *driver.Request, w *waiting) (driver.Grant, error) {
	path := d.path(req.Key)
	f, start, err := tryLock(path, lockEx)
	if errors.Is(err, driver.ErrLocked) {
		// Declare the intent to write before waiting: shared requests that
		// arrive from now on stop at the intent file until we hold the key.
		var intent *os.File
		intent, _, err = d.waitFile(ctx, w, path+intentSuffix, lockEx)
		if err != nil {
			return driver.Grant{}, err
		}
		f, start, err = d.waitFile(ctx, w, path, lockEx)
		intent.Close()
	}
	if err != nil {
		return driver.Grant{}, err
	}
	return d.grantExclusive(ctx, req, f, path, start)
}

// acquireShared passes the intent file (waiting there while an exclusive
// request holds it), then waits for a shared flock on the lock file.
func (d *Driver) acquireShared(ctx context.Context, req *driver.Request, w *waiting) (driver.Grant, error) {
	path := d.path(req.Key)
	gate, _, err := d.waitFile(ctx, w, path+intentSuffix, lockSh)
	if err != nil {
		return driver.Grant{}, err
	}
	gate.Close()
	f, start, err := d.waitFile(ctx, w, path, lockSh)
	if err != nil {
		return driver.Grant{}, err
	}
	return d.grantGuarded(ctx, req, &holding{f: f, path: path, start: start}, kindShared)
}

// acquirePermit joins the semaphore, then, if others wait, queues behind
// them, and waits for a free slot: every holder closes its descriptor on the
// permits file last when it gives its permit back (and the kernel closes it
// when the holder dies), so the waiter at the head of the queue watches that
// one file whatever n is.
func (d *Driver) acquirePermit(ctx context.Context, req *driver.Request, w *waiting) (driver.Grant, error) {
	if err := checkPermits(req.Permits); err != nil {
		return driver.Grant{}, err
	}
	path := d.path(req.Key)
	meta, err := d.joinSemaphore(ctx, path+permitsSuffix, req.Permits)
	if err != nil {
		return driver.Grant{}, err
	}
	var (
		slot     *os.File
		slotPath string
		start    time.Time
	)
	trySlot := func() (bool, error) {
		var err error
		slot, slotPath, start, err = trySlots(path, req.Permits)
		if errors.Is(err, driver.ErrLocked) {
			return false, nil
		}
		return err == nil, err
	}
	// A free slot is taken at once only while nobody queues for one: a
	// request that arrives while others wait goes behind them (see
	// queue_linux.go), however soon it sees a slot free.
	ok := false
	if queueEmpty(path + queueSuffix) {
		ok, err = trySlot()
	}
	if !ok && err == nil {
		var t *ticket
		t, err = d.enqueue(ctx, w, path+queueSuffix)
		if err == nil {
			err = d.waitUntil(ctx, w, path+permitsSuffix, trySlot)
			t.leave() // the next waiter's turn, as soon as this one has a slot (or gave up)
		}
	}
	if err != nil {
		meta.Close()
		return driver.Grant{}, err
	}
	f, _, err := d.waitFile(ctx, w, path, lockSh) // waits only if the key is also used as a lock
	if err != nil {
		slot.Close()
		meta.Close()
		return driver.Grant{}, err
	}
	h := &holding{f: slot, path: slotPath, extra: []*os.File{f, meta}, start: start}
	return d.grantGuarded(ctx, req, h, kindPermit)
}

// waitFile opens path and waits until it holds a flock on it in mode, and
// returns the file and when the successful flock was attempted. The waiter
// keeps its descriptor open while it waits: were each retry to open and close
// the file, every waiter would wake every other for ever. A file replaced at
// path while it waits is reopened.
//
// The recheck after every flock is what keeps a waiter that was blocked on a
// lock file ForceRelease replaced from holding the old file beside the new
// file's holder: it finds the path changed and moves to the new file.
func (d *Driver) waitFile(ctx context.Context, w *waiting, path string, mode int) (*os.File, time.Time, error) {
	for {
		f, err := openLockFile(path)
		if err != nil {
			return nil, time.Time{}, err
		}
		var start time.Time
		err = d.waitUntil(ctx, w, path, func() (bool, error) {
			start = time.Now()
			err := flockNB(f, mode)
			if err != nil && !errors.Is(err, driver.ErrLocked) {
				return false, err
			}
			same, serr := samePath(f, path)
			if serr != nil {
				return false, serr
			}
			if !same {
				return false, errReplaced
			}
			return err == nil, nil
		})
		if err == nil {
			return f, start, nil
		}
		f.Close() // drops the flock if we just took it on a stale file
		if !errors.Is(err, errReplaced) {
			return nil, time.Time{}, err
		}
	}
}

// waitUntil calls try until it reports success or an error: at once, then
// each time a descriptor on watchPath is closed, and at the fallback recheck.
// It watches before the first try, so a release right after a failed try is
// still reported.
func (d *Driver) waitUntil(ctx context.Context, w *waiting, watchPath string, try func() (bool, error)) error {
	wake := make(chan struct{}, 1)
	unwatch, werr := d.watcher().watch(watchPath, watchMask, wake)
	defer unwatch()
	recheck := fallbackRecheck
	if werr != nil {
		recheck = pollRecheck
	}
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	settle := len(settleRechecks) // index of the next settle recheck; none until woken
	for {
		ok, err := try()
		if err != nil || ok {
			return err
		}
		w.block()
		if d.testHookWait != nil {
			d.testHookWait(w.key)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.held.Done():
			return driver.ErrClosed
		case <-wake:
			settle = 0
			resetTimer(timer, settleRechecks[0])
			driver.Woke(ctx, driver.WakeNotified)
		case <-timer.C:
			// A settle recheck belongs to the wake-up by the close event
			// before it (one handoff, one wake-up); the others are the
			// fallback's.
			if settle >= len(settleRechecks) {
				driver.Woke(ctx, driver.WakeTimer)
			}
			if settle++; settle < len(settleRechecks) {
				timer.Reset(settleRechecks[settle])
			} else {
				timer.Reset(recheck)
			}
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// notifier is the Driver's inotify state, guarded by Driver.held.
type notifier struct {
	w   *watcher
	err error // why inotify is unavailable; waiters then poll
}

func (n notifier) close() {
	if n.w != nil {
		n.w.close()
	}
}

// watcher returns the Driver's inotify watcher, starting it on first use. It
// returns nil, on which watch fails, if the driver is closed or inotify is
// unavailable (for example fs.inotify.max_user_instances reached).
func (d *Driver) watcher() *watcher {
	d.held.Lock()
	defer d.held.Unlock()
	if d.held.OpenLocked() != nil {
		return nil
	}
	if d.notify.w == nil && d.notify.err == nil {
		d.notify.w, d.notify.err = newWatcher()
	}
	return d.notify.w
}

// watcher is one inotify instance and the goroutine that reads it, shared by all
// waiters of a Driver. Waiters on the same file share its watch descriptor.
type watcher struct {
	f    *os.File      // nonblocking, so reads use the runtime poller and Close ends them
	done chan struct{} // closed when the reader has returned

	// mu orders a watch descriptor's first waiter after its inotify_add_watch
	// and its last before its inotify_rm_watch, and both before Close.
	mu      sync.Mutex
	closed  bool
	waiters kit.Waiters[int32] // by watch descriptor
}

func newWatcher() (*watcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{})}
	go w.read()
	return w, nil
}

// watch adds a watch for the events in mask on path and registers ch to be
// sent to (without blocking) on each event about the file. The returned
// function unregisters ch and removes the watch when no waiter is left; it
// must be called exactly once. Every watch of one file must use the same mask
// (the kernel keeps one per file): lock files are watched with watchMask,
// holders directories with holdersMask.
func (w *watcher) watch(path string, mask uint32, ch chan<- struct{}) (func(), error) {
	if w == nil {
		return func() {}, errors.New("filedriver: no inotify watcher")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return func() {}, driver.ErrClosed
	}
	var wd int
	var err error
	if cerr := w.control(func(fd int) { wd, err = syscall.InotifyAddWatch(fd, path, mask) }); cerr != nil {
		return func() {}, cerr
	}
	if err != nil {
		return func() {}, os.NewSyscallError("inotify_add_watch", err)
	}
	w.waiters.Add(int32(wd), ch)
	return func() { w.unwatch(int32(wd), ch) }, nil
}

// unwatch unregisters ch from wd and removes the watch when ch was its last
// waiter (not when the kernel removed it already: then wd was dropped).
func (w *watcher) unwatch(wd int32, ch chan<- struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters.Remove(wd, ch) && !w.closed {
		_ = w.control(func(fd int) { _, _ = syscall.InotifyRmWatch(fd, uint32(wd)) })
	}
}

// control runs fn on the inotify descriptor while it cannot be closed, so a
// descriptor number reused after Close is never touched.
func (w *watcher) control(fn func(fd int)) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// read dispatches inotify events until the watcher is closed. Should reading
// fail otherwise, waiters fall back to their recheck timers.
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		w.dispatch(buf[:n])
	}
}

func (w *watcher) dispatch(events []byte) {
	for len(events) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(events[0:]))
		mask := binary.NativeEndian.Uint32(events[4:])
		size := syscall.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(events[12:]))
		if size > len(events) {
			size = len(events)
		}
		events = events[size:]
		switch {
		case mask&syscall.IN_Q_OVERFLOW != 0: // events were dropped: wake everyone
			w.waiters.WakeAll()
		case mask&syscall.IN_IGNORED != 0: // the kernel removed the watch
			w.waiters.Drop(wd)
		default:
			w.waiters.Wake(wd)
		}
	}
}

// close stops the reader and waits for it to return.
func (w *watcher) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	w.f.Close() // ends the pending Read
	<-w.done
}

// watches counts the watch descriptors in use, for tests.
func (w *watcher) watches() int { return w.waiters.Keys() }

// holdersMask: what changes a key's holders directory when its holders
// change: a holder file created (a grant, a waiter arriving), written (a
// relabel), closed by a writer (a release, or the death of its process),
// removed (a release, a waiter leaving), renamed (an eviction). Inspect opens
// holder files read-only, and the close of those (IN_CLOSE_NOWRITE) is left
// out, or a reader looking again after each signal would signal itself.
const holdersMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_ONLYDIR | syscall.IN_DONT_FOLLOW

var _ driver.Watcher = (*Driver)(nil)

// Watch implements driver.Watcher with inotify on the key's holders
// directory (created if missing), which changes with every grant, release,
// eviction, relabelling, waiter arriving or leaving, and death of a holder's
// process. It also signals when Inspect removes a dead process's files.
func (d *Driver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	dir := d.path(key) + holdersSuffix
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("filedriver: create holders directory: %w", err)
	}
	ch := make(chan struct{}, 1)
	unwatch, err := d.watcher().watch(dir, holdersMask, ch)
	if err != nil {
		unwatch()
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-d.held.Done():
		}
		unwatch() // no send on ch after it returns
		close(ch)
	}()
	return ch, nil
}

// waiting is one Acquire call, which flocks a waiter file the first time it
// blocks so that Inspect can count it. Waiter files stay, for the next
// waiters.
type waiting struct {
	d          *Driver
	key, owner string
	tried      bool
	f          *os.File
}

// maxWaiterFiles bounds the waiter files of a key; waiters beyond are not
// counted.
const maxWaiterFiles = 1024

func (w *waiting) block() {
	if w.tried {
		return
	}
	w.tried = true
	dir := w.d.path(w.key) + holdersSuffix
	// Best effort: a waiter that cannot publish itself still waits; it is
	// just not counted.
	for i := 1; i <= maxWaiterFiles; i++ {
		f, err := openHolderFile(dir, waiterPrefix+strconv.Itoa(i))
		if err != nil {
			return
		}
		if flockNB(f, lockEx) == nil {
			w.f = f
			return
		}
		f.Close()
	}
}

func (w *waiting) done() {
	if w.f != nil {
		w.f.Close()
	}
}
