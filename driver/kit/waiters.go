package kit

import "sync"

// Waiters is a set of waiting calls by key: a waiter registers a channel
// under the key it waits on, the driver wakes the waiters of a key when the
// backend reports a change to it (a release announced, a file closed), and
// wakes them all when it may have missed reports (after a reconnection, or an
// overflow of the backend's event queue). A wake sends on each channel
// without blocking, so a channel of capacity 1 keeps one wake-up until its
// waiter takes it. The zero value is ready to use.
type Waiters[K comparable] struct {
	mu sync.Mutex
	m  map[K]map[chan<- struct{}]struct{}
}

// Add registers ch under k and reports whether it is k's first waiter (the
// driver then starts watching k).
func (w *Waiters[K]) Add(k K, ch chan<- struct{}) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[K]map[chan<- struct{}]struct{}{}
	}
	set := w.m[k]
	if set == nil {
		set = map[chan<- struct{}]struct{}{}
		w.m[k] = set
	}
	set[ch] = struct{}{}
	return len(set) == 1
}

// Remove unregisters ch from k and reports whether ch was k's last waiter
// (the driver then stops watching k). Removing a channel that is not
// registered under k (k was dropped meanwhile) reports false.
func (w *Waiters[K]) Remove(k K, ch chan<- struct{}) (last bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.m[k]
	if _, ok := set[ch]; !ok {
		return false
	}
	delete(set, ch)
	if len(set) > 0 {
		return false
	}
	delete(w.m, k)
	return true
}

// Wake wakes every waiter of k.
func (w *Waiters[K]) Wake(k K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wake(w.m[k])
}

// WakeAll wakes every waiter of every key.
func (w *Waiters[K]) WakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, set := range w.m {
		wake(set)
	}
}

// Drop wakes the waiters of k and forgets k (the backend stopped reporting
// on it): they must register again to be woken, and their Remove reports
// false.
func (w *Waiters[K]) Drop(k K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wake(w.m[k])
	delete(w.m, k)
}

// Keys counts the keys that have waiters.
func (w *Waiters[K]) Keys() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

func wake(set map[chan<- struct{}]struct{}) {
	for ch := range set {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
