package filedriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
