package kit

import (
	"context"
	"sync"

	"github.com/distlock/lock/driver"
)

// Book is a driver's table of the locks it holds, with the gate every call
// passes: once Close has begun no hold is recorded, every call gets
// driver.ErrClosed and Done is closed.
//
// The Book is the driver's mutex too (Lock, Unlock), so a driver changes the
// table and its own state in one critical section; the methods named ...Locked
// are called with it held. K names a hold: the key and the owner, so that a
// request of the same owner finds its hold again, as the driver contract
// wants. Make one with NewBook.
type Book[K comparable, H comparable] struct {
	sync.Mutex
	held   map[K]H
	closed bool
	done   chan struct{}
}

// NewBook returns an empty, open Book.
func NewBook[K comparable, H comparable]() *Book[K, H] {
	return &Book[K, H]{held: map[K]H{}, done: make(chan struct{})}
}

// Done is closed when Close begins, so that a wait selecting on it ends.
func (b *Book[K, H]) Done() <-chan struct{} { return b.done }

// Check returns ctx's error, or driver.ErrClosed once Close has begun: what a
// call returns before it starts.
func (b *Book[K, H]) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.Lock()
	defer b.Unlock()
	return b.OpenLocked()
}

// OpenLocked returns driver.ErrClosed once Close has begun, else nil.
func (b *Book[K, H]) OpenLocked() error {
	if b.closed {
		return driver.ErrClosed
	}
	return nil
}

// ClosedLocked reports whether Close has begun.
func (b *Book[K, H]) ClosedLocked() bool { return b.closed }

// GetLocked returns k's hold, or the zero H if there is none.
func (b *Book[K, H]) GetLocked(k K) H { return b.held[k] }

// LookupLocked returns k's hold and whether there is one.
func (b *Book[K, H]) LookupLocked(k K) (H, bool) {
	h, ok := b.held[k]
	return h, ok
}

// LenLocked is the number of holds.
func (b *Book[K, H]) LenLocked() int { return len(b.held) }

// PutLocked records h as k's hold. Once Close has begun it records nothing
// and returns driver.ErrClosed: the caller then ends h itself.
func (b *Book[K, H]) PutLocked(k K, h H) error {
	if b.closed {
		return driver.ErrClosed
	}
	b.held[k] = h
	return nil
}

// TakeLocked removes k's hold and returns it; ok is false if there was none.
func (b *Book[K, H]) TakeLocked(k K) (h H, ok bool) {
	h, ok = b.held[k]
	delete(b.held, k)
	return h, ok
}

// ForgetLocked removes k's hold if it is still h (a hold taken anew meanwhile
// stays) and reports whether it did.
func (b *Book[K, H]) ForgetLocked(k K, h H) bool {
	if got, ok := b.held[k]; !ok || got != h {
		return false
	}
	delete(b.held, k)
	return true
}

// EachLocked calls f for every hold, in no order.
func (b *Book[K, H]) EachLocked(f func(K, H)) {
	for k, h := range b.held {
		f(k, h)
	}
}

// CloseLocked begins Close: from now on the gate is shut and Done is closed. It returns the holds, which the table forgets, for the
// driver to end after it unlocks the Book; first is false (and held nil) if
// Close had begun before.
func (b *Book[K, H]) CloseLocked() (held []H, first bool) {
	if b.closed {
		return nil, false
	}
	b.closed = true
	close(b.done)
	for _, h := range b.held {
		held = append(held, h)
	}
	clear(b.held)
	return held, true
}
