package filedriver

import (
	"bytes"
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
	"github.com/distlock/lock/driver/kit"
)

// Holder files. flock(2) tells whether a file is locked, not by whom, so each
// holder publishes itself in the key's holders directory ("K.lock.h", beside
// the lock file "K.lock") in a holder file that it keeps exclusively flocked
// for as long as it holds the key:
//
//   - an exclusive holder in "e", which stays from one holder to the next:
//     creating and removing a file for every grant would add a directory
//     update to the journal commit of each fsync of the counter, which
//     doubles the cost of an uncontended lock on ext4. Each holder flocks it,
//     then writes itself into it; a reader takes its content as the holder's
//     only once it agrees with the lock file's counter;
//   - a shared or permit holder in "s-" plus its owner, created when it is
//     granted and removed when it lets go.
//
// A holder file holds one line, then the key (List needs it: long keys' file
// names are hashed), then the label:
//
//	<token> <exclusive|shared|permit> <owner> <len(key)> <len(label)>\n<key>\n<label>\n
//
// A request waiting in Acquire flocks one of the waiter files "w1", "w2", ...
// (the first it can) while it waits, so that Inspect can count it.
//
// A removable holder file whose flock anyone can take belongs to a process
// that died (the kernel dropped its flocks but could not remove the file):
// Inspect and List skip it and remove it. ForceRelease renames each holder
// file it evicts to "x-" plus the owner, a tombstone its holder still has
// flocked; the evicted holder's next Refresh finds it there
// (driver.ErrForceReleased) and removes it. A tombstone lives as long as
// its holder keeps it flocked, and no longer than tombstoneLife after the
// eviction (ForceRelease sets its modification time then).
const (
	holdersSuffix = ".h"
	exclusiveName = "e"
	sharedPrefix  = "s-"
	waiterPrefix  = "w"
	evictedPrefix = "x-"

	kindExclusive = "exclusive"
	kindShared    = "shared"
	kindPermit    = "permit"

	// staleAge is how old a removable holder file with no content must be,
	// unflocked, before Inspect removes it: its writer died between creating
	// it and writing it. A younger one may be one whose writer has not
	// flocked it yet.
	staleAge = time.Minute

	// maxHolderFile bounds what Inspect reads of a holder file: the line, a
	// key and a label.
	maxHolderFile = 128 + driver.MaxKeyLen + driver.MaxLabelLen
)

// tombstoneLife bounds the life of a tombstone whose holder still flocks it:
// kit.TombstoneLife of an unknown TTL (a holder file does not record its
// holder's TTL). scan removes an older one: its holder, refreshing within
// its TTL, would have read it, so it has lost its lock by its own validity.
var tombstoneLife = kit.TombstoneLife(0)

func encodeHolder(token uint64, kind, id, key, label string) []byte {
	b := make([]byte, 0, 48+len(id)+len(key)+len(label))
	b = strconv.AppendUint(b, token, 10)
	b = append(b, ' ')
	b = append(b, kind...)
	b = append(b, ' ')
	b = append(b, id...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(label)), 10)
	b = append(b, '\n')
	b = append(b, key...)
	b = append(b, '\n')
	b = append(b, label...)
	return append(b, '\n')
}

// holderInfo is a parsed holder file.
type holderInfo struct {
	token      uint64
	kind, id   string // id: the owner, escaped
	key, label string
}

// parseHolder reads a holder file's content; ok is false for one that is
// incomplete or torn (being rewritten by Relabel).
func parseHolder(b []byte) (holderInfo, bool) {
	line, rest, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return holderInfo{}, false
	}
	f := strings.Fields(string(line))
	if len(f) != 5 {
		return holderInfo{}, false
	}
	token, err1 := strconv.ParseUint(f[0], 10, 64)
	kl, err2 := strconv.Atoi(f[3])
	ll, err3 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil || kl < 0 || ll < 0 || len(rest) != kl+1+ll+1 ||
		rest[kl] != '\n' || rest[len(rest)-1] != '\n' {
		return holderInfo{}, false
	}
	return holderInfo{token: token, kind: f[1], id: f[2], key: string(rest[:kl]), label: string(rest[kl+1 : kl+1+ll])}, true
}

// createFlocked creates the file name in dir (and dir if missing), takes an
// exclusive flock on it and writes content. The flock may have to wait a
// moment for an Inspect that tries it to let go.
func (d *Driver) createFlocked(ctx context.Context, dir, name string, content []byte) (*os.File, error) {
	p := filepath.Join(dir, name)
	f, err := openHolderFile(dir, name)
	if err != nil {
		return nil, err
	}
	err = flockNB(f, lockEx)
	if errors.Is(err, driver.ErrLocked) {
		err = d.lockBriefly(ctx, f, lockEx)
	}
	if err == nil {
		_, err = f.WriteAt(content, 0)
	}
	if err != nil {
		os.Remove(p)
		f.Close()
		return nil, fmt.Errorf("filedriver: write holder file: %w", err)
	}
	return f, nil
}

// openHolderFile opens (creating it, and dir, if missing) the file name in
// the holders directory dir.
func openHolderFile(dir, name string) (*os.File, error) {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, openFlags, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("filedriver: create holders directory: %w", err)
		}
		f, err = os.OpenFile(p, openFlags, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("filedriver: open holder file: %w", err)
	}
	return f, nil
}

// publish writes h's holder file, for req in the shape kind (shared or
// permit).
func (d *Driver) publish(ctx context.Context, req *driver.Request, h *holding, kind string) error {
	h.dir, h.id = d.path(req.Key)+holdersSuffix, escapeName(req.Owner)
	f, err := d.createFlocked(ctx, h.dir, sharedPrefix+h.id, encodeHolder(h.token, kind, h.id, req.Key, req.Label))
	if err != nil {
		h.dir = ""
		return err
	}
	h.pub = f
	return nil
}

// publishExclusive writes h, the exclusive hold of req, into the key's kept
// holder file "e": it flocks it, then writes. The flock may have to wait a
// moment for an Inspect that tries it. A holder that keeps it longer has
// lost the key without knowing yet (its lock file was deleted or replaced
// under it), or is a request that locked a lock file ForceRelease has since
// replaced and lets go once it sees that: so does this request if it finds
// its own lock file replaced (errReplaced); otherwise it puts a new "e" in
// place of the one kept flocked.
func (d *Driver) publishExclusive(ctx context.Context, req *driver.Request, h *holding) error {
	dir, id := d.path(req.Key)+holdersSuffix, escapeName(req.Owner)
	content := encodeHolder(h.token, kindExclusive, id, req.Key, req.Label)
	f, err := openHolderFile(dir, exclusiveName)
	if err != nil {
		return err
	}
	err = flockNB(f, lockEx)
	if errors.Is(err, driver.ErrLocked) {
		deadline := time.Now().Add(keptPatience)
		err = d.lockWhile(ctx, f, lockEx, func() error {
			if err := checkSame(h.f, h.path); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return errKeptBusy
			}
			return nil
		})
	}
	if errors.Is(err, errKeptBusy) {
		f.Close()
		f, err = replace(filepath.Join(dir, exclusiveName), func(f *os.File) error { return writeAll(f, content) })
		if err != nil {
			return err
		}
	} else if err == nil {
		err = writeAll(f, content)
	}
	if err != nil {
		f.Close()
		return err
	}
	h.pub, h.dir, h.id, h.kept = f, dir, id, true
	return nil
}

// keptPatience is how long an exclusive holder waits for the flock of the
// kept holder file before it replaces the file: far longer than an Inspect
// keeps it.
const keptPatience = 2 * time.Millisecond

var errKeptBusy = errors.New("kept holder file busy")

// writeAll makes b the whole content of f. It truncates f only if it was
// longer: a truncate, even to the same size, updates the inode's times, which
// the next fsync of the counter then commits too.
func writeAll(f *os.File, b []byte) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("filedriver: write holder file: %w", err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("filedriver: write holder file: %w", err)
	}
	if fi.Size() > int64(len(b)) {
		if err := f.Truncate(int64(len(b))); err != nil {
			return fmt.Errorf("filedriver: write holder file: %w", err)
		}
	}
	return nil
}

// unpublish removes the shared or permit holder file of id in dir, or its
// tombstone if it was evicted.
func unpublish(dir, id string) {
	if err := os.Remove(filepath.Join(dir, sharedPrefix+id)); errors.Is(err, fs.ErrNotExist) {
		os.Remove(filepath.Join(dir, evictedPrefix+id))
	}
}

// evicted reports whether ForceRelease left a tombstone for id in dir.
func evicted(dir, id string) bool {
	_, err := os.Lstat(filepath.Join(dir, evictedPrefix+id))
	return err == nil
}

// expired removes the tombstone at p if it is older than tombstoneLife, and
// reports whether it did.
func expired(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil || time.Since(fi.ModTime()) <= tombstoneLife {
		return false
	}
	return os.Remove(p) == nil
}

// holderEntry is a live holder file found by scan.
type holderEntry struct {
	name string // its file name
	holderInfo
}

// scan reads the holders directory dir: its live holder files (with their
// content), its live waiter files (counted), and the removable files of dead
// processes, which it removes. With first set it stops at the first live
// holder. The kept exclusive holder file's content may still be its previous
// holder's for a moment after a new holder flocked it: Inspect checks it.
func scan(dir string, first bool) (holders []holderEntry, waiters int, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("filedriver: read holders directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		var holder, removable bool
		switch {
		case name == exclusiveName:
			holder = true
		case strings.HasPrefix(name, sharedPrefix):
			holder, removable = true, true
		case strings.HasPrefix(name, evictedPrefix):
			removable = true
			if expired(filepath.Join(dir, name)) {
				continue
			}
		case strings.HasPrefix(name, waiterPrefix):
		default:
			continue
		}
		live, content, err := probe(filepath.Join(dir, name), holder, removable)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case !live:
		case strings.HasPrefix(name, waiterPrefix):
			waiters++
		case holder:
			hi, ok := parseHolder(content)
			if !ok {
				continue // not written yet
			}
			holders = append(holders, holderEntry{name: name, holderInfo: hi})
			if first {
				return holders, waiters, nil
			}
		}
	}
	return holders, waiters, nil
}

// probe reports whether the file at p is flocked by its (live) writer, and
// the content of a holder file. A removable file nobody flocks is a dead
// process's: probe removes it, unless it is empty and young (its writer may
// not have flocked it yet).
func probe(p string, holder, removable bool) (live bool, content []byte, err error) {
	f, err := os.OpenFile(p, readFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("filedriver: open holder file: %w", err)
	}
	defer f.Close() // read-only: its close wakes no holders directory watch
	locked := flockNB(f, lockEx)
	if locked != nil && !errors.Is(locked, driver.ErrLocked) {
		return false, nil, locked
	}
	if locked == nil && !removable {
		return false, nil, nil
	}
	if holder || locked == nil {
		if content, err = readHolder(f); err != nil {
			return false, nil, err
		}
	}
	if locked != nil {
		return true, content, nil
	}
	if len(content) == 0 {
		if fi, err := f.Stat(); err != nil || time.Since(fi.ModTime()) < staleAge {
			return false, nil, nil
		}
	}
	os.Remove(p)
	return false, nil, nil
}

// readHolder reads a holder file's content. One being rewritten (by Relabel,
// or by a new exclusive holder) can read torn, even into something that
// parses, so it takes the content once two reads in a row agree and parse,
// reading a few times at most.
func readHolder(f *os.File) ([]byte, error) {
	var prev []byte
	for i := 0; i < 5; i++ {
		buf := make([]byte, maxHolderFile)
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("filedriver: read holder file: %w", err)
		}
		cur := buf[:n]
		if _, ok := parseHolder(cur); ok && bytes.Equal(cur, prev) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

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
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.ErrClosed
	}
	return nil
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
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.ErrClosed
	}
	h := d.held[holdKey{req.Key, req.Owner}]
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
	d.mu.Unlock()
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
