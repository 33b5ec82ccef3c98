// Package filedriver is the distlock driver for lock files in a local directory,
// locked with flock(2). It needs no server, and it coordinates every process of
// one host that uses the same directory.
//
//	import _ "github.com/distlock/lock/filedriver"
//
//	locker, err := lock.Open(ctx, "file:///var/lock/myapp")
//
// Each key has one lock file under the prefix's subdirectory ("distlock" unless
// set). A holder keeps the file open and flocked; the kernel drops the lock when
// that descriptor is closed, also when the process dies, so a crashed holder
// never blocks anyone. The file holds the key's fencing counter, so lock files
// are never removed. Two descriptors in one process exclude each other, so
// independent Lockers in one program coordinate too. The recipe, the proofs and
// the measured figures are in
// https://github.com/distlock/lock/blob/main/docs/backends/file.md.
//
// # URL format
//
//	file:///path/to/dir
//	file:///path/to/dir?prefix=myapp&ttl=10s
//
// The path must be absolute (file://localhost/path is accepted too); missing
// directories are created with mode 0755. The driver has no parameters of its
// own; the portable ones are package lock's, and any other is an error. File
// names are the key with bytes outside [a-z0-9_.-] escaped as %XX, plus ".lock";
// long keys are cut and followed by "~" and a SHA-256, so distinct keys get
// distinct files, also on case-insensitive file systems.
//
// # Capabilities
//
//   - Fencing: yes; the last token lives in the lock file, written and fsynced
//     before it is handed out.
//   - Expiring: no; a lock lives until released or until its holder's process
//     ends.
//   - Notify: on Linux (inotify on the lock file); elsewhere the portable layer
//     polls.
//   - FIFO: no; flock(2) promises no order among waiters (permit waiters queue
//     in arrival order on Linux).
//   - Shared: yes; every grant takes the next token of the key's counter.
//   - WriterPreference: on Linux, through the key's writer-intent file;
//     elsewhere a stream of readers can starve a writer.
//   - Permits: yes, up to MaxPermits; another n is driver.ErrInvalidArgument.
//   - MinTTL and MaxTTL: 10ms and 366 days (driver.FloorTTL,
//     driver.DefaultMaxTTL).
//
// # Lost locks
//
// The TTL bounds how long a lock is trusted without a confirmed check: each
// refresh checks that the descriptor is open and the lock file was not replaced.
// Causes: lock.ErrSessionExpired (the descriptor was closed under the holder),
// lock.ErrForceReleased, lock.ErrTakenOver (the file was deleted or replaced by
// hand), lock.ErrExpired.
//
// # Limits
//
//   - One host only: flock(2) on NFS and other network file systems does not
//     give these guarantees.
//   - Deleting or replacing a lock file by hand breaks exclusion and restarts
//     its tokens at 1; use ForceRelease (distlock release --force).
//   - Lock files are created with mode 0644: processes of different users share
//     a lock only if the directory and files are writable for all of them.
//   - Each held lock keeps two file descriptors open (four for a permit).
//   - A key used both as a read-write lock and as a semaphore is seen only
//     between exclusive and permit requests: shared holders and permit
//     holders of one key are granted together (conformance:
//     AKeyInUseInOneShapeIsNotGrantedInAnother, skipped here for it).
package filedriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
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
	dir string // where the lock files are: the directory plus the prefix

	// held is the driver's mutex, its held locks and its closed gate (Done
	// ends waiting Acquire calls); it guards notify and each holding's f.
	held   *kit.Book[holdKey, *holding]
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
	f     *os.File // nil once severed; guarded by Driver.held
	path  string   // the file f has open, checked by Refresh
	extra []*os.File
	token uint64
	start time.Time // when the flock that took it was attempted

	// The hold's holder file (see holders.go), flocked while it holds; nil
	// until published.
	pub  *os.File
	dir  string // the key's holders directory
	id   string // the owner, escaped: names its shared holder file and tombstone
	kept bool   // pub is the key's kept exclusive holder file, never removed
}

// detach returns the hold's descriptors, f first, and forgets them; the caller
// closes them in that order. It must be called with Driver.held locked.
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
	return &Driver{dir: full, held: kit.NewBook[holdKey, *holding]()}, nil
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

// sever closes every lock file descriptor this client holds, as the kernel does
// when the process dies, so other clients can take the locks at once. The holder
// learns it at its next refresh (driver.ErrNotHeld), which with automatic refresh
// closes the lock's Lost channel. Only the package's tests call it (the
// conformance suite's Harness.Sever): in a live process nothing else closes a
// lock's descriptor.
func (d *Driver) sever() {
	d.held.Lock()
	var files []*os.File
	d.held.EachLocked(func(_ holdKey, h *holding) { files = append(files, h.detach()...) })
	d.held.Unlock()
	closeAll(files)
}

// Close closes every lock file descriptor, which releases the locks still held as
// the end of the process would, makes waiting Acquire calls return
// driver.ErrClosed, and stops the inotify reader. Later calls return
// driver.ErrClosed; closing twice returns nil.
func (d *Driver) Close() error {
	d.held.Lock()
	held, first := d.held.CloseLocked()
	if !first {
		d.held.Unlock()
		return nil
	}
	type ending struct {
		h     *holding
		files []*os.File
	}
	var ends []ending
	for _, h := range held {
		ends = append(ends, ending{h, h.detach()})
	}
	n := d.notify
	d.held.Unlock()
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
