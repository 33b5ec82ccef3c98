package kit

import "testing"

func woken(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A key's waiters are woken by Wake of that key only, all are woken by
// WakeAll, and a wake-up waits in the channel without blocking the waker.
func TestWaitersWakeAKeyOrAll(t *testing.T) {
	var w Waiters[string]
	a1, a2, b := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	if !w.Add("a", a1) || w.Add("a", a2) || !w.Add("b", b) {
		t.Fatal("Add: first reported wrongly")
	}
	w.Wake("a")
	w.Wake("a") // a second wake-up before the first is taken does not block
	if !woken(a1) || !woken(a2) || woken(b) {
		t.Fatal("Wake(a) woke the wrong waiters")
	}
	w.WakeAll()
	if !woken(a1) || !woken(a2) || !woken(b) {
		t.Fatal("WakeAll missed a waiter")
	}
	if w.Keys() != 2 {
		t.Fatalf("Keys = %d; want 2", w.Keys())
	}
	if w.Remove("a", a1) || !w.Remove("a", a2) || !w.Remove("b", b) {
		t.Fatal("Remove: last reported wrongly")
	}
	if w.Keys() != 0 {
		t.Fatalf("Keys = %d after every waiter left; want 0", w.Keys())
	}
	w.Wake("a")
	if woken(a1) {
		t.Fatal("a removed waiter was woken")
	}
}

// Drop wakes a key's waiters and forgets the key: their Remove reports
// false, and a waiter registered afterwards under the same key is first.
func TestWaitersDrop(t *testing.T) {
	var w Waiters[int32]
	old, fresh := make(chan struct{}, 1), make(chan struct{}, 1)
	w.Add(7, old)
	w.Drop(7)
	if !woken(old) {
		t.Fatal("Drop did not wake the key's waiter")
	}
	if !w.Add(7, fresh) {
		t.Fatal("the first waiter after Drop was not first")
	}
	if w.Remove(7, old) {
		t.Fatal("Remove of a dropped waiter reported last")
	}
	if !w.Remove(7, fresh) {
		t.Fatal("Remove of the last waiter reported false")
	}
}
