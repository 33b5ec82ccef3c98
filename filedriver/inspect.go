package filedriver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
)

var _ driver.Inspector = (*Driver)(nil)

// Inspect implements driver.Inspector: the key's live holder files, the
// counter in its lock file, its waiters on Linux (-1 elsewhere, where the
// portable layer's polling waits without publishing itself), and its
// permits file while permits are held. It removes the holder files of dead
// processes it finds.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := d.check(ctx); err != nil {
		return driver.Info{}, err
	}
	path := d.path(key)
	entries, waiters, err := scan(path+holdersSuffix, false)
	if err != nil {
		return driver.Info{}, err
	}
	in := driver.Info{Waiters: waiters}
	if !notifySupported {
		in.Waiters = -1
	}
	counter, err := readNumber(path)
	if err != nil {
		return driver.Info{}, err
	}
	in.Token = counter
	for _, e := range entries {
		if e.key != key { // another key whose long name hashed alike: never seen
			continue
		}
		if e.name == exclusiveName && e.token != counter {
			// The kept exclusive holder file still names its previous holder:
			// the new one has flocked it and is about to write itself in.
			continue
		}
		in.Holders = append(in.Holders, driver.Holder{Owner: e.id, Label: e.label, Shared: e.kind == kindShared, Token: e.token})
		in.Token = max(in.Token, e.token)
		if e.kind == kindPermit && in.Permits == 0 {
			n, err := readNumber(path + permitsSuffix)
			if err != nil {
				return driver.Info{}, err
			}
			in.Permits = int(n)
		}
	}
	if n, ok := kernelWaiters(path); ok && in.Waiters >= 0 {
		// Users of the lock file that publish nothing (flock(1), say) and
		// block in flock(2); this driver's waiters never do. Their holders
		// are not shown: from /proc/locks they look like one of ours in the
		// moment between its flock and its holder file.
		in.Waiters += n
	}
	slices.SortFunc(in.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return in, nil
}

// readNumber reads the decimal number in the file at p (a fencing counter,
// a number of permits); a missing file or one that does not hold a number
// reads as 0.
func readNumber(p string) (uint64, error) {
	f, err := os.OpenFile(p, readFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("filedriver: open %s: %w", p, err)
	}
	defer f.Close()
	var buf [maxCounterLen]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("filedriver: read %s: %w", p, err)
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
	return v, nil
}

// check returns the error of a call made after Close or with ctx done.
func (d *Driver) check(ctx context.Context) error {
	return d.held.Check(ctx)
}

var _ driver.Lister = (*Driver)(nil)

// List implements driver.Lister by walking the lock directory: a key is held
// while its holders directory has a live holder file, which also gives the
// key (file names of long keys are hashed).
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("filedriver: read lock directory: %w", err)
	}
	var keys []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), lockSuffix+holdersSuffix) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		found, _, err := scan(filepath.Join(d.dir, e.Name()), true)
		if err != nil {
			return nil, err
		}
		if len(found) == 1 && strings.HasPrefix(found[0].key, prefix) {
			keys = append(keys, found[0].key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

var _ driver.Labeler = (*Driver)(nil)

// Relabel implements driver.Labeler: it rewrites req.Owner's holder file.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.held.Lock()
	if err := d.held.OpenLocked(); err != nil {
		d.held.Unlock()
		return err
	}
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	var pub, f *os.File
	var kind string
	if h != nil {
		pub, f = h.pub, h.f
		switch {
		case len(h.extra) > 0:
			kind = kindPermit
		case req.Shared:
			kind = kindShared
		default:
			kind = kindExclusive
		}
	}
	d.held.Unlock()
	if pub == nil || f == nil {
		return driver.ErrNotHeld
	}
	if same, err := samePath(f, h.path); err != nil || !same {
		return driver.ErrNotHeld // evicted or replaced: its Refresh will tell
	}
	return writeAll(pub, encodeHolder(h.token, kind, h.id, req.Key, label))
}

var _ driver.Evictor = (*Driver)(nil)

// ForceRelease implements driver.Evictor. flock(2) cannot take a lock from
// another process, so it replaces the key's files under their holders: under
// the counter guard (which holds back shared and permit grants, and other
// ForceRelease calls), it renames each live holder file to its tombstone,
// creates a new lock file holding the counter, exclusively flocked, and
// renames it over the old one, replaces the slot files of a semaphore the
// same way, renames the holder files that appeared meanwhile, and lets the
// new lock file go. Every acquire path checks after its flock, and again
// after publishing its holder file, that the files it locked are still
// there, so nobody is granted the old files from then on; the evicted
// holders keep their flocks on files no one else will lock, learn at their
// next Refresh that they were evicted (driver.ErrForceReleased), and can free
// nothing but those.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	path := d.path(key)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, driver.ErrNotHeld // never used: leave no guard file behind
	}
	g, err := openLockFile(path + guardSuffix)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	if err := d.lockBriefly(ctx, g, lockEx); err != nil {
		return 0, err
	}

	old, err := os.OpenFile(path, os.O_RDWR|(openFlags&^os.O_CREATE), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, driver.ErrNotHeld
	}
	if err != nil {
		return 0, fmt.Errorf("filedriver: open lock file: %w", err)
	}
	defer old.Close()
	switch err := flockNB(old, lockEx); {
	case err == nil: // nobody holds it; closing old lets it go
		return 0, driver.ErrNotHeld
	case !errors.Is(err, driver.ErrLocked):
		return 0, err
	}

	dir := path + holdersSuffix
	n, err := tombstone(dir)
	if err != nil {
		return 0, err
	}
	counter, err := stableCounter(old)
	if err != nil {
		return 0, err
	}
	nf, err := replace(path, func(f *os.File) error { return writeCounter(f, counter) })
	if err != nil {
		return 0, err
	}
	defer nf.Close() // last: lets the new lock file go
	// Tokens granted on the old file before the rename were written before
	// it; a later grant there fails its check and is never handed out.
	if after, err := stableCounter(old); err != nil {
		return 0, err
	} else if after > counter {
		if err := writeCounter(nf, after); err != nil {
			return 0, err
		}
	}
	if permits, err := readNumber(path + permitsSuffix); err != nil {
		return 0, err
	} else {
		for i := 1; i <= int(min(permits, MaxPermits)); i++ {
			slot := path + slotSuffix + strconv.Itoa(i)
			if _, err := os.Lstat(slot); err != nil {
				continue
			}
			f, err := replace(slot, nil)
			if err != nil {
				return 0, err
			}
			f.Close()
		}
		if permits > 0 {
			wakePermitWaiters(path + permitsSuffix)
		}
	}
	more, err := tombstone(dir)
	if err != nil {
		return 0, err
	}
	return max(n+more, 1), nil // a holder that has not published yet counts too
}

// wakePermitWaiters opens and closes the permits file at p for writing: the
// close wakes the permit requests that watch it (evicted holders keep their
// descriptors on it, so no other close would come), and they find the new
// slot files free.
func wakePermitWaiters(p string) {
	if f, err := os.OpenFile(p, os.O_RDWR|(openFlags&^os.O_CREATE), 0); err == nil {
		f.Close()
	}
}

// tombstone renames every live holder file in dir to its tombstone name and
// returns how many it renamed.
func tombstone(dir string) (int, error) {
	holders, _, err := scan(dir, false)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range holders {
		stone := filepath.Join(dir, evictedPrefix+h.id)
		err := os.Rename(filepath.Join(dir, h.name), stone)
		switch {
		case err == nil:
			// The eviction's time, from which the tombstone's life counts
			// (best effort: a holder file of another user may refuse it).
			now := time.Now()
			_ = os.Chtimes(stone, now, now)
			n++
		case !errors.Is(err, fs.ErrNotExist): // released meanwhile
			return 0, fmt.Errorf("filedriver: evict holder: %w", err)
		}
	}
	return n, nil
}

// stableCounter reads the fencing counter of f without its flock (its
// holder keeps that) until two reads agree, so a write under way cannot give
// a torn value.
func stableCounter(f *os.File) (uint64, error) {
	read := func() (string, error) {
		var buf [maxCounterLen]byte
		n, err := f.ReadAt(buf[:], 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("filedriver: read fencing counter: %w", err)
		}
		return string(buf[:n]), nil
	}
	prev, err := read()
	if err != nil {
		return 0, err
	}
	for {
		cur, err := read()
		if err != nil {
			return 0, err
		}
		if cur == prev {
			if strings.TrimSpace(cur) == "" {
				return 0, nil
			}
			v, err := strconv.ParseUint(strings.TrimSpace(cur), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("filedriver: %s does not hold a fencing counter (%q); refusing to replace it", f.Name(), cur)
			}
			return v, nil
		}
		prev = cur
	}
}

// writeCounter writes v as the fencing counter of f and syncs it.
func writeCounter(f *os.File, v uint64) error {
	out := strconv.AppendUint(nil, v, 10)
	out = append(out, '\n')
	if _, err := f.WriteAt(out, 0); err != nil {
		return fmt.Errorf("filedriver: write fencing counter: %w", err)
	}
	if err := f.Truncate(int64(len(out))); err != nil {
		return fmt.Errorf("filedriver: write fencing counter: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("filedriver: sync fencing counter: %w", err)
	}
	return nil
}

// replace creates a new file beside path, exclusively flocked, lets fill
// write it, and renames it over path. It returns the new file, still
// flocked. Its temporary name starts with '.', which no key's file name
// does.
func replace(path string, fill func(*os.File) error) (*os.File, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	f, err := os.OpenFile(tmp, openFlags|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filedriver: create replacement: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		os.Remove(tmp)
		f.Close()
		return nil, err
	}
	if err := flockNB(f, lockEx); err != nil {
		return fail(err)
	}
	if fill != nil {
		if err := fill(f); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("filedriver: replace %s: %w", path, err))
	}
	return f, nil
}
