//go:build linux

package filedriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock/driver"
)

// The permit queue. flock(2) wakes the waiters of a file in no set order,
// and inotify reports a close to the watchers of a file in a fixed order (the
// order of their watches), so permit waiters that all retried the slots on
// every permit given back were served by luck and by that order: a holder
// that gave its permit back and asked again at once took the slot back
// before the waiters woke, and the waiters of the Driver watching first took
// the rest (a waiter could get nothing for as long as the others churned).
//
// So waiting permit requests queue, first come first served, in the key's
// queue directory "K.lock.q": each creates a ticket file there, named by the
// time it arrived (and a random tie-breaker), flocked exclusively while it
// waits, and only the oldest ticket looks for a free slot. Every other waits
// for the ticket just before its own to go: it keeps a descriptor on that
// file and is woken by its close (inotify), so a permit given back wakes
// one waiter, not all. A ticket whose process died is unlocked by the kernel,
// and the one behind it removes it. Ticket names come from the wall clock of
// each process, so the order across processes is that of their clocks. A
// process that dies between creating its ticket and queueing it (under a
// hidden name, see enqueue) leaves an empty hidden file, which the queue
// ignores.

// ticket is one waiting permit request's place in the queue.
type ticket struct {
	f    *os.File
	path string
}

// leave takes the ticket out of the queue: removed, then unlocked before the
// close whose event wakes the next waiter (a close alone reports the event
// before it drops the flock).
func (t *ticket) leave() {
	os.Remove(t.path)
	_ = flockNB(t.f, syscall.LOCK_UN)
	t.f.Close()
}

// queueEmpty reports whether no permit request waits in the queue directory.
func queueEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true // no directory: nobody has queued yet
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(16)
		for _, n := range names {
			if !strings.HasPrefix(n, ".") {
				return false
			}
		}
		if err != nil {
			return true
		}
	}
}

// enqueue puts a ticket in the queue directory dir and waits until it is the
// oldest there.
func (d *Driver) enqueue(ctx context.Context, w *waiting, dir string) (*ticket, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("filedriver: create permit queue: %w", err)
	}
	var tie [6]byte
	if _, err := rand.Read(tie[:]); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%020d-%s", time.Now().UnixNano(), hex.EncodeToString(tie[:]))
	// Created under a hidden name, which the queue ignores, and renamed in
	// once flocked: a ticket in the queue that is not locked is always a
	// dead one, safe to remove.
	tmp := filepath.Join(dir, "."+name)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filedriver: create permit ticket: %w", err)
	}
	if err := flockNB(f, lockEx); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	t := &ticket{f: f, path: filepath.Join(dir, name)}
	if err := os.Rename(tmp, t.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("filedriver: queue permit ticket: %w", err)
	}
	for {
		ahead, err := ticketAhead(dir, name)
		if err == nil && ahead == "" {
			return t, nil
		}
		if err == nil {
			err = d.waitGone(ctx, w, filepath.Join(dir, ahead))
		}
		if err != nil {
			t.leave()
			return nil, err
		}
	}
}

// ticketAhead returns the name of the ticket just before name in dir, or ""
// if name is the oldest.
func ticketAhead(dir, name string) (string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("filedriver: read permit queue: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("filedriver: read permit queue: %w", err)
	}
	sort.Strings(names)
	i := sort.SearchStrings(names, name)
	for i--; i >= 0; i-- {
		if !strings.HasPrefix(names[i], ".") {
			return names[i], nil
		}
	}
	return "", nil
}

// waitGone waits until the ticket at p has left the queue (or its process
// died, and then removes it). It keeps one descriptor on the ticket while it
// waits and only retries the flock on it: opening and closing the file on
// each retry would wake itself for ever.
func (d *Driver) waitGone(ctx context.Context, w *waiting, p string) error {
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone already
	}
	if err != nil {
		return fmt.Errorf("filedriver: open permit ticket: %w", err)
	}
	defer f.Close()
	err = d.waitUntil(ctx, w, p, func() (bool, error) {
		err := flockNB(f, lockEx)
		if errors.Is(err, driver.ErrLocked) {
			return false, nil
		}
		return err == nil, err
	})
	if err == nil {
		// Unlocked: its waiter left (and removed it), or died (and we do).
		// Nobody locks a ticket in the queue again, so this cannot remove a
		// live one.
		os.Remove(p)
		_ = flockNB(f, syscall.LOCK_UN)
	}
	return err
}
