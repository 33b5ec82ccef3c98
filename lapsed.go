package lock

// The lapsed set of a shard holds the locks lost by their validity deadline
// that still need a release on the backend: on a session-bound backend the
// session may still hold them, and nobody else should get them while their
// holder may not yet have looked at Lost. Whoever takes a lock out of the set
// (the holder's Release or Do, or Close) releases it on the backend. This
// file is the only one that touches the set.

// addLapsedLocked puts l, just ended by its deadline, in the set; sh.mu is
// held.
func (sh *shard) addLapsedLocked(l *Lock) {
	l.set(flagLapsed, true)
	if sh.lapsed == nil {
		sh.lapsed = map[*Lock]struct{}{}
	}
	sh.lapsed[l] = struct{}{}
}

// takeAllLapsedLocked empties the set into out, for Close; sh.mu is held.
func (sh *shard) takeAllLapsedLocked(out []*Lock) []*Lock {
	for l := range sh.lapsed {
		l.set(flagLapsed, false)
		out = append(out, l)
	}
	clear(sh.lapsed)
	return out
}

// takeLapsed reports whether l was lost by its deadline and still needs a
// release on the backend, and makes the caller responsible for it.
func (lk *Locker) takeLapsed(l *Lock) bool {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !l.has(flagLapsed) {
		return false
	}
	l.set(flagLapsed, false)
	delete(sh.lapsed, l)
	return true
}

// keepLapsed gives a lapsed lock whose release failed back to Close (unless
// Close has already taken the set).
func (lk *Locker) keepLapsed(l *Lock) {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.closed {
		sh.addLapsedLocked(l)
	}
}
