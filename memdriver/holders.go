package memdriver

// holderSet is a key's holders by owner. Most keys have at most one holder
// (an exclusive lock), which the set keeps in place, with no map: a held key
// then costs its keyState alone. The other holders of a shared lock or a
// semaphore go to a map made when the second one comes. Pointers to holders
// are valid only until the set next changes (the store's lock is held
// meanwhile).
type holderSet struct {
	first      holder
	firstOwner string
	hasFirst   bool
	more       map[string]*holder // the holders besides first; kept, emptied, for reuse
}

// len is the number of holders.
func (hs *holderSet) len() int {
	if !hs.hasFirst {
		return 0
	}
	return 1 + len(hs.more)
}

// get returns owner's hold, or nil.
func (hs *holderSet) get(owner string) *holder {
	if hs.hasFirst && hs.firstOwner == owner {
		return &hs.first
	}
	return hs.more[owner] // nil map: nil
}

// put adds owner's hold; owner holds nothing yet.
func (hs *holderSet) put(owner string, h holder) {
	if !hs.hasFirst {
		hs.first, hs.firstOwner, hs.hasFirst = h, owner, true
		return
	}
	if hs.more == nil {
		hs.more = map[string]*holder{}
	}
	p := new(holder) // not &h, which would move every h to the heap
	*p = h
	hs.more[owner] = p
}

// delete removes owner's hold, if any.
func (hs *holderSet) delete(owner string) {
	if hs.hasFirst && hs.firstOwner == owner {
		hs.removeFirst()
		return
	}
	delete(hs.more, owner)
}

// removeFirst drops the first hold, and moves another (if any) in its place,
// so that a set with holders always has its first.
func (hs *holderSet) removeFirst() {
	hs.first, hs.firstOwner, hs.hasFirst = holder{}, "", false
	for o, h := range hs.more {
		hs.first, hs.firstOwner, hs.hasFirst = *h, o, true
		delete(hs.more, o)
		break
	}
}

// deleteFunc removes the holds for which f returns true and says how many.
// f sees every hold once.
func (hs *holderSet) deleteFunc(f func(owner string, h *holder) bool) int {
	n := 0
	if len(hs.more) > 0 { // no map iteration on the common path
		for o, h := range hs.more {
			if f(o, h) {
				delete(hs.more, o)
				n++
			}
		}
	}
	if hs.hasFirst && f(hs.firstOwner, &hs.first) {
		hs.removeFirst()
		n++
	}
	return n
}

// each calls f for every hold.
func (hs *holderSet) each(f func(owner string, h *holder)) {
	if !hs.hasFirst {
		return
	}
	f(hs.firstOwner, &hs.first)
	if len(hs.more) == 0 {
		return // no map iteration on the common path
	}
	for o, h := range hs.more {
		f(o, h)
	}
}

// clear removes every hold.
func (hs *holderSet) clear() {
	hs.first, hs.firstOwner, hs.hasFirst = holder{}, "", false
	clear(hs.more)
}
