// Package filedriver is the distlock driver for lock files in a local directory,
// locked with flock(2). It needs no server, and it coordinates every process of
// one host that uses the same directory.
//
//	import _ "github.com/distlock/lock/filedriver"
//
//	locker, err := lock.Open(ctx, "file:///var/lock/myapp")
//
// Each key has one lock file in a subdirectory of the directory named by the
// prefix ("distlock" unless set). A holder keeps the file open and flocked; the
// kernel drops the lock when that descriptor is closed, which also happens when
// the process dies for any reason, so a crashed or killed holder never blocks
// anyone. The file's content is the key's fencing counter, so lock files are
// never removed (removing one would restart its tokens at 1; ForceRelease
// replaces one with a copy of its counter). A key used as a read-write lock or a
// semaphore also has companion files beside its lock file (see Queueing rule);
// they are never removed either.
//
// It coordinates processes on one host only: flock(2) on NFS and other network
// file systems is emulated, or local to each client, and does not give the
// guarantees described here. Two descriptors in one process exclude each other, so
// independent Lockers in one program coordinate too.
//
// # URL format
//
//	file:///path/to/dir
//	file:///path/to/dir?prefix=myapp&ttl=10s
//
// The path must be absolute (file://localhost/path is accepted too). The
// directory and the prefix subdirectory are created if missing, with mode 0755.
// The driver has no query parameters of its own; the portable ones (ttl,
// auto_refresh, prefix) are described in package lock, and any other is an error.
// Lock file names are the key with bytes outside [a-z0-9_.-] escaped as %XX,
// plus ".lock"; keys whose escaped form is longer than 128 bytes are cut and
// followed by "~" and a SHA-256 of the key. Distinct keys get distinct files, also
// on case-insensitive file systems.
//
// # Capabilities
//
//   - Fencing: yes; the last token lives in the lock file, written and fsynced
//     by the holder before it is handed out, so tokens increase across holders,
//     processes and restarts of both.
//   - Expiring: no; a lock lives until it is released or its holder's process
//     ends (session-bound).
//   - Notify: on Linux; a waiter watches the lock file with inotify, and every
//     close of a descriptor on it (a release, or a holder's death) wakes it.
//     Elsewhere the portable layer polls.
//   - FIFO: no; flock(2) promises no order among waiters.
//   - Shared: yes. Every grant, exclusive, shared or permit, takes the next
//     token of the key's counter, so a writer's token fences every reader
//     before it.
//   - WriterPreference: on Linux, by the rule below. Elsewhere a waiting
//     writer polls (it never holds the intent file while it waits), so a
//     stream of readers can starve it.
//   - Permits: yes, up to MaxPermits; a request for another number of
//     permits than the current holders' and waiters' is ErrInvalidArgument.
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL and
//     driver.DefaultMaxTTL), package lock's range: the TTL bounds how long a lock is trusted without a confirmed refresh.
//
// # Queueing rule
//
// A shared lock is a shared flock(2) on the key's lock file, an exclusive lock
// an exclusive one. Beside the lock file ("K.lock") lies the key's
// writer-intent file ("K.lock.w"):
//
//   - exclusive: TryAcquire, and Acquire at first, try the lock file alone. An
//     Acquire that finds it taken then takes the intent file exclusively (after
//     the exclusive request that holds it, if any), waits for the lock file
//     while holding it, and lets it go once it holds the key;
//   - shared: a request first passes the intent file (takes a shared flock on
//     it and drops it at once), waiting there while an exclusive request
//     holds it (TryAcquire: ErrLocked), then takes or waits for its shared
//     flock on the lock file.
//
// So once an exclusive Acquire holds the intent file, shared requests that
// arrive after it wait behind it until it holds the key, and then until it
// releases it; shared requests that passed the intent file before it, holding
// the key or on their way to it, keep their turn. A writer therefore waits
// for the readers ahead of it and for the writers that took the intent file
// before it, and the readers that slip in while the intent file changes hands
// between two waiting writers. Among requests at the lock file itself, and
// among exclusive requests, flock(2) sets no order.
//
// A semaphore of n permits has n slot files ("K.lock.s1" to "K.lock.sn"), a
// permit being an exclusive flock on one of them, and a permits file
// ("K.lock.n") holding n: holders and waiters keep a shared flock on it, and
// the first to find it unused writes its n there, so a request for another n
// while anyone holds or waits is ErrInvalidArgument. Permits are granted to
// waiting requests in arrival order (on Linux, where Acquire waits): a
// request that finds every slot held, or others already waiting, queues in
// the directory "K.lock.q" (a ticket file named by its arrival time,
// flocked while it waits), and only the oldest ticket looks for a free slot,
// woken by the close of the permits file, which every holder closes last
// when it gives its permit back; each other waiter is woken by the close of
// the ticket just ahead of its own. So a holder that gives a permit back and
// asks again at once queues behind the waiters rather than taking its slot
// back, and no waiter starves while others churn. Arrival order across
// processes is that of their clocks; a TryAcquire (and, off Linux, the
// portable layer's polling) takes a free slot without queueing. Permit
// holders also hold a shared flock on the lock file, in which their tokens
// are counted, so the key used as an exclusive lock and as a semaphore at
// once is not reported but the two exclude each other; a shared lock and a
// semaphore on one key do not (do not mix them). Shared and permit holders
// bump the token counter under a brief exclusive flock of "K.lock.g".
//
// # Inspection, eviction and leader election
//
// The driver implements driver.Inspector, driver.Lister, driver.Evictor and
// driver.Labeler everywhere, and driver.Watcher on Linux, so Inspect, List,
// ForceRelease, Campaign, Leader and Observe work, as do the distlock
// status, list, release --force, elect and leader commands.
//
// Layout. flock(2) tells whether a file is locked but not by whom, so each
// holder also publishes itself in the key's holders directory "K.lock.h"
// beside the lock file, in a holder file it keeps exclusively flocked while
// it holds the key: an exclusive holder in "e", which stays from one holder
// to the next (each flocks it and writes itself in), a shared or permit
// holder in "s-" plus its owner id, created at the grant and removed before
// the release. A holder file holds the holder's token, shape (exclusive,
// shared or permit), owner id, the key and its label:
//
//	<token> <shape> <owner> <len(key)> <len(label)>
//	<key>
//	<label>
//
// An Acquire that has to wait keeps one of the waiter files "w1", "w2", ...
// flocked until it returns. The directory and the kept files stay, like the
// lock file. Other flock(2) users of the lock file (flock(1), say) keep
// excluding and being excluded, but publish nothing, so Inspect and List do
// not show them as holders; on Linux, Inspect counts those blocked in
// flock(2) as waiters (from /proc/locks: this driver's waiters never block
// in the kernel).
//
// Exact: holders, their shapes, tokens and labels (Inspect reads the holder
// files a live process keeps flocked); the latest token (the counter in the
// lock file); Waiters on Linux, counting this driver's waiting Acquire calls
// and other programs' flock(2) calls blocked on the lock file. Approximate: a
// holder shows from just after its grant until just before its release (the
// content of "e" counts only once it agrees with the lock file's counter), and
// a holder file whose process died (the kernel drops its flock but cannot
// remove the file) is skipped by Inspect and List, which remove it unless it
// is a kept one. Since is zero (the portable layer reads the holder's time
// from its label) and Expires is zero (session-bound). Waiters is -1 where the
// portable layer polls (no inotify), as such waiters publish nothing.
//
// List walks the lock directory and reports the keys whose holders
// directory has a live holder file, reading each key from it (long keys'
// file names are hashed).
//
// ForceRelease. No process can take another's flock, so ForceRelease
// replaces the key's files under their holders. Holding the key's counter
// guard (which holds back shared and permit grants and other ForceRelease
// calls), it renames each live holder file to a tombstone "x-" plus the
// owner id, writes the counter into a new, exclusively flocked lock file
// and renames it over the old one (so tokens continue: the next grant's
// token exceeds every evicted holder's), replaces a semaphore's slot files
// the same way, renames to tombstones the holder files that appeared
// meanwhile, and lets the new lock file go. The evicted holders keep flocks
// on files nobody else will lock: their next Refresh finds the lock file
// replaced and their tombstone there, returns driver.ErrNotHeld wrapping
// driver.ErrForceReleased (so Lock.Err matches lock.ErrForceReleased) and
// removes the tombstone, whose life is so bounded by the holder's refresh
// interval (or its process: a tombstone nobody flocks is removed by
// Inspect); their Release frees nothing of the new holder's. Every acquire
// path (exclusive, shared, permits, the writer-intent and slot files, and
// waiters already blocked on the old file) checks after its flock that the
// path still names the file it locked, and checks again after it has taken
// its token and published its holder file (under the counter guard for
// shared and permit grants): a request that finds its file replaced drops
// it and starts again on the new one, so no request holds the old file
// beside the new file's holder, and its token is never handed out. A
// request whose second check passed held the key before the replacement
// and is evicted with the others. An evicted holder learns of it at its
// next refresh, not at once.
//
// Watch uses inotify on the holders directory, which changes with every
// grant, release, eviction, relabelling, and the death of a holder's process
// (the kernel's close of its holder file); elsewhere Observe polls.
//
// The kept exclusive holder file costs an exclusive grant an open, a flock,
// an fstat and a write, and a check of the lock file's path: a few
// microseconds beside the fsync of the counter. (Creating and removing a
// file per grant instead would add a directory update to every fsync's
// journal commit, which on ext4 doubled the cost of an uncontended lock.)
//
// # TTL
//
// A lock here cannot expire, so the TTL does not bound how long it lives. It
// bounds how long the lock is trusted without a confirmed check: every refresh
// verifies that the descriptor is still open and that the lock file was not deleted
// or replaced (by an operator, say); if no check succeeds within the TTL, Lost
// closes. Turning automatic refresh off is not supported.
//
// # Lost locks
//
// A refresh that finds the lock gone says why (lock.Err matches it):
//
//   - lock.ErrSessionExpired: the lock's descriptor was closed under the
//     holder, as the kernel closes it when the process dies (the conformance
//     suite's Harness.Sever does it to a live client);
//   - lock.ErrForceReleased: ForceRelease replaced the lock file (its
//     tombstone is there);
//   - lock.ErrTakenOver: the lock file was deleted or replaced otherwise, so
//     another process can lock the new file;
//   - lock.ErrExpired (from package lock): no check succeeded within the TTL.
//
// # Limits
//
// Deleting or replacing a lock file by hand while it is held breaks exclusion
// (a new holder locks the new file); the holder notices at its next refresh
// and loses the lock, but the new file's tokens start again at 1. Use
// ForceRelease (distlock release --force) instead, which keeps the tokens and
// tells the holder. A lock file that is a symbolic link or not a regular file
// is refused, so a link planted in a shared directory such as /tmp cannot make
// the driver write elsewhere. Lock files are created with mode 0644, so
// processes of different users share a lock only if the directory and files
// are made writable for all of them.
//
// Each held lock keeps two file descriptors open (the lock file and its
// holder file; four for a permit), and each waiting Acquire one (two for a
// writer waiting with the intent file), plus its waiter file; none needs a
// goroutine: one inotify reader serves all the waiters of a Driver. Go raises
// the soft RLIMIT_NOFILE to the hard limit at start-up. A waiting permit
// request keeps two more (its ticket and the ticket ahead of it); the one at
// the head of the queue tries the slot files in turn each time a permit is
// given back, so a wake-up costs up to n opens.
package filedriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// DefaultPrefix names the subdirectory for lock files when no prefix is given.
const DefaultPrefix = "distlock"

// Option configures a Driver made by New.
type Option func(*options)

type options struct {
	prefix string
}

// WithPrefix names the subdirectory of the lock directory that holds the lock
// files, so they cannot clash with anything else there. Any string is accepted
// (it is escaped as keys are); empty means DefaultPrefix.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// Driver locks keys with flock(2) on files in one directory. Use it through
// lock.New or lock.Open; its methods implement driver.Driver.
type Driver struct {
	dir  string        // where the lock files are: the directory plus the prefix
	done chan struct{} // closed by Close, to end waiting Acquire calls

	mu     sync.Mutex
	closed bool
	held   map[holdKey]*holding
	notify notifier // the inotify reader on Linux, started by the first waiter

	// testHookWait, if set, runs each time a waiting Acquire is about to block.
	testHookWait func(key string)
	// testHookGranting, if set, runs when a request has flocked the key's
	// files and checked them, before it takes a token.
	testHookGranting func(key string)
}

type holdKey struct{ key, owner string }

// holding is one held lock: an open, flocked descriptor on its lock file (or,
// for a permit, on its slot file), and the other descriptors the hold keeps.
type holding struct {
	f     *os.File // nil once severed; guarded by Driver.mu
	path  string   // the file f has open, checked by Refresh
	extra []*os.File
	token uint64
	start time.Time // when the flock that took it was attempted

	// The hold's holder file (see inspect.go), flocked while it holds; nil
	// until published.
	pub  *os.File
	dir  string // the key's holders directory
	id   string // the owner, escaped: names its shared holder file and tombstone
	kept bool   // pub is the key's kept exclusive holder file, never removed
}

// detach returns the hold's descriptors, f first, and forgets them; the caller
// closes them in that order. It must be called with Driver.mu held.
func (h *holding) detach() []*os.File {
	if h.f == nil {
		return nil
	}
	var files []*os.File
	if h.pub != nil {
		files = append(files, h.pub)
	}
	files = append(append(files, h.f), h.extra...)
	h.f, h.extra, h.pub = nil, nil, nil
	return files
}

// end takes down the hold's holder file and then closes files, the hold's
// descriptors from detach, holder file first: so Inspect never shows a
// holder after the key is free for another. A shared or permit holder file
// is removed (or its tombstone, after an eviction); the kept exclusive one
// is only let go, and its tombstone removed if replaced says the hold was
// found replaced (perhaps evicted).
func (h *holding) end(files []*os.File, replaced bool) {
	if h.dir != "" && files != nil {
		switch {
		case !h.kept:
			unpublish(h.dir, h.id)
		case replaced:
			os.Remove(filepath.Join(h.dir, evictedPrefix+h.id))
		}
	}
	closeAll(files)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

var _ driver.Driver = (*Driver)(nil)

// New returns a Driver for lock files under dir (a relative dir is made absolute),
// in the DefaultPrefix subdirectory, creating both if missing. It coordinates with
// every Driver and lock.Open("file://...") on the same directory and prefix.
func New(dir string, opts ...Option) (*Driver, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if platformErr != nil {
		return nil, platformErr
	}
	if dir == "" {
		return nil, errors.New("filedriver: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filedriver: %w", err)
	}
	prefix := o.prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	full := filepath.Join(abs, escapeName(prefix))
	if err := os.MkdirAll(full, 0o755); err != nil {
		return nil, fmt.Errorf("filedriver: create lock directory: %w", err)
	}
	return &Driver{dir: full, done: make(chan struct{}), held: map[holdKey]*holding{}}, nil
}

// Capabilities reports the driver's guarantees; see the package documentation.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing: true, Expiring: false, Notify: notifySupported,
		Shared: true, WriterPreference: notifySupported, Permits: true,
		MinTTL: driver.FloorTTL, MaxTTL: driver.DefaultMaxTTL,
	}
}

func (d *Driver) path(key string) string { return filepath.Join(d.dir, fileName(key)) }

// TryAcquire makes one attempt to take the key in the shape req asks for
// (see the package documentation). It returns driver.ErrLocked if the key is
// taken, or if a shared request finds an exclusive one waiting, and the same
// grant again if req.Owner already holds it.
func (d *Driver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if g, ok, err := d.heldBy(req); ok || err != nil {
		return g, err
	}
	switch {
	case req.Permits > 1:
		return d.tryPermit(ctx, req)
	case req.Shared:
		return d.tryShared(ctx, req)
	}
	path := d.path(req.Key)
	for i := 0; ; i++ {
		f, start, err := tryLock(path, lockEx)
		if err != nil {
			return driver.Grant{}, err
		}
		g, err := d.grantExclusive(ctx, req, f, path, start)
		if !errors.Is(err, errReplaced) || i == maxReplaced {
			return g, err
		}
	}
}

// heldBy reports the grant of req.Owner if it already holds req.Key.
func (d *Driver) heldBy(req *driver.Request) (driver.Grant, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.Grant{}, false, driver.ErrClosed
	}
	k := holdKey{req.Key, req.Owner}
	h := d.held[k]
	if h == nil {
		return driver.Grant{}, false, nil
	}
	if h.f == nil { // severed: the lock is gone, take it afresh
		delete(d.held, k)
		return driver.Grant{}, false, nil
	}
	return driver.Grant{Token: h.token, Start: h.start}, true, nil
}

// maxReplaced bounds how often one TryAcquire reopens a lock file that was
// replaced between its open and its flock.
const maxReplaced = 8

// tryLock opens and flocks path in mode without waiting, and returns the locked
// file and the time the successful flock was attempted.
func tryLock(path string, mode int) (*os.File, time.Time, error) {
	for i := 0; ; i++ {
		f, err := openLockFile(path)
		if err != nil {
			return nil, time.Time{}, err
		}
		start := time.Now()
		if err := flockNB(f, mode); err != nil {
			f.Close()
			return nil, time.Time{}, err
		}
		same, err := samePath(f, path)
		if err != nil || same {
			if err != nil {
				f.Close()
				return nil, time.Time{}, err
			}
			return f, start, nil
		}
		f.Close() // we locked a file that is no longer at path
		if i == maxReplaced {
			return nil, time.Time{}, fmt.Errorf("filedriver: lock file %s keeps being replaced", path)
		}
	}
}

// grantExclusive bumps the fencing counter of the exclusively locked file f and
// records the lock, taken by a flock attempted at start. It publishes the
// holder file, then checks again that path still names f: ForceRelease may
// have replaced the lock file since our flock, and a lock on the old file
// excludes no one, so that is errReplaced (the caller starts again) and the
// token is never handed out. A check that passes comes before the
// replacement, whose second tombstone pass then finds our holder file.
func (d *Driver) grantExclusive(ctx context.Context, req *driver.Request, f *os.File, path string, start time.Time) (driver.Grant, error) {
	if d.testHookGranting != nil {
		d.testHookGranting(req.Key)
	}
	token, err := nextToken(f)
	if err != nil {
		f.Close()
		return driver.Grant{}, err
	}
	h := &holding{f: f, path: path, token: token, start: start}
	if err := d.publishExclusive(ctx, req, h); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	if err := checkSame(f, path); err != nil {
		h.end(h.detach(), false)
		return driver.Grant{}, err
	}
	return d.grant(req, h)
}

// errReplaced: the path no longer names the file a request has locked, so
// it starts again on the file now there.
var errReplaced = errors.New("lock file replaced")

// checkSame returns errReplaced unless path still names the file f has open.
func checkSame(f *os.File, path string) error {
	same, err := samePath(f, path)
	switch {
	case err != nil:
		return err
	case !same:
		return errReplaced
	}
	return nil
}

// grant records h, whose token is set, as req's lock; if the driver was closed
// meanwhile it closes h's descriptors instead.
func (d *Driver) grant(req *driver.Request, h *holding) (driver.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		h.end(h.detach(), false)
		return driver.Grant{}, driver.ErrClosed
	}
	d.held[holdKey{req.Key, req.Owner}] = h
	return driver.Grant{Token: h.token, Start: h.start}, nil
}

// Refresh confirms that req.Owner still holds req.Key: its descriptor is open
// (so the flock is ours) and the lock file at the key's path is still the file it
// locked. A lock file deleted or replaced behind our back means another process
// can lock the new file, so that is driver.ErrNotHeld, and the lock is dropped.
func (d *Driver) Refresh(ctx context.Context, req *driver.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := holdKey{req.Key, req.Owner}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	h := d.held[k]
	var f *os.File
	if h != nil {
		f = h.f
	}
	d.mu.Unlock()
	if h == nil {
		return driver.ErrNotHeld
	}
	if f == nil {
		d.drop(k, h, false)
		return errSevered
	}
	same, err := samePath(f, h.path)
	switch {
	case errors.Is(err, os.ErrClosed): // severed while we looked
		d.drop(k, h, false)
		return errSevered
	case err != nil:
		return err
	case !same:
		forced := h.dir != "" && evicted(h.dir, h.id)
		d.drop(k, h, true)
		if forced {
			return fmt.Errorf("%w: %w: lock file %s was replaced", driver.ErrNotHeld, driver.ErrForceReleased, h.path)
		}
		return fmt.Errorf("%w: %w: lock file %s was deleted or replaced", driver.ErrNotHeld, driver.ErrTakenOver, h.path)
	}
	return nil
}

// errSevered: the descriptor, the client's hold on the flock, is gone as a
// session is.
var errSevered = fmt.Errorf("%w: %w: the lock file descriptor was closed", driver.ErrNotHeld, driver.ErrSessionExpired)

// drop forgets h and closes its descriptor, if it is still the lock of k;
// replaced: its lock file was found replaced.
func (d *Driver) drop(k holdKey, h *holding, replaced bool) {
	d.mu.Lock()
	if d.held[k] == h {
		delete(d.held, k)
	}
	files := h.detach()
	d.mu.Unlock()
	h.end(files, replaced)
}

// Release closes req.Owner's descriptor on the key's lock file, which drops the
// flock. It returns driver.ErrNotHeld if req.Owner holds no lock on req.Key, or if
// the lock file had been deleted or replaced so the lock no longer excluded
// anyone; it never touches another owner's descriptor.
func (d *Driver) Release(ctx context.Context, req *driver.Request) error {
	k := holdKey{req.Key, req.Owner}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	h := d.held[k]
	if h == nil {
		d.mu.Unlock()
		return driver.ErrNotHeld
	}
	delete(d.held, k)
	f := h.f
	files := h.detach()
	d.mu.Unlock()
	if files == nil {
		return errSevered
	}
	same, err := samePath(f, h.path)
	h.end(files, err == nil && !same) // closing the last descriptor of an open file drops its flock
	if err == nil && !same {
		return fmt.Errorf("%w: lock file %s was deleted or replaced", driver.ErrNotHeld, h.path)
	}
	return nil
}

// sever closes every lock file descriptor this client holds, as the kernel does
// when the process dies, so other clients can take the locks at once. The holder
// learns it at its next refresh (driver.ErrNotHeld), which with automatic refresh
// closes the lock's Lost channel. Only the package's tests call it (the
// conformance suite's Harness.Sever): in a live process nothing else closes a
// lock's descriptor.
func (d *Driver) sever() {
	d.mu.Lock()
	var files []*os.File
	for _, h := range d.held {
		files = append(files, h.detach()...)
	}
	d.mu.Unlock()
	closeAll(files)
}

// Close closes every lock file descriptor, which releases the locks still held as
// the end of the process would, makes waiting Acquire calls return
// driver.ErrClosed, and stops the inotify reader. Later calls return
// driver.ErrClosed; closing twice returns nil.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	type ending struct {
		h     *holding
		files []*os.File
	}
	var ends []ending
	for _, h := range d.held {
		ends = append(ends, ending{h, h.detach()})
	}
	d.held = nil
	n := d.notify
	d.mu.Unlock()
	for _, e := range ends {
		e.h.end(e.files, false)
	}
	n.close()
	return nil
}

// openLockFile opens (creating if missing) the lock file at path.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, openFlags, 0o644)
	if err != nil {
		if isSymlinkErr(err) {
			return nil, fmt.Errorf("filedriver: lock file %s is a symbolic link; lock files must be regular files", path)
		}
		return nil, fmt.Errorf("filedriver: open lock file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("filedriver: stat lock file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("filedriver: lock file %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	return f, nil
}

// samePath reports whether path still names the file f has open. It is false
// when the file was deleted, or replaced by another.
func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("filedriver: stat lock file: %w", err)
	}
	return os.SameFile(fi, pi), nil
}
