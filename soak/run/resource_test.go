package run

import (
	"testing"
	"time"

	"github.com/distlock/lock/soak/check"
)

// The resource is fenced by package fence's rule: a token at least the
// largest admitted (by a read or a write) is admitted, a smaller one is
// refused and changes nothing, and every operation is recorded with its
// outcome.
func TestResourceRefusesAStaleTokenAndAdmitsTheHoldersOwnAgain(t *testing.T) {
	r := NewResource()
	if v, ok := r.Read(0, 1, "k", 1, now(), 0); !ok || v != 0 {
		t.Fatalf("first read with token 1: %d, %v; want 0, admitted", v, ok)
	}
	if v, ok := r.Read(1, 1, "k", 2, now(), 0); !ok || v != 0 {
		t.Fatalf("read with token 2: %d, %v; want 0, admitted", v, ok)
	}
	if r.Write(0, 1, "k", 1, 0, now(), 0) {
		t.Fatal("write with token 1 after a read with token 2 was admitted")
	}
	if !r.Write(1, 1, "k", 2, 0, now(), 0) || !r.Write(1, 1, "k", 2, 1, now(), 0) {
		t.Fatal("the token-2 holder's two writes were not both admitted")
	}
	if v, ok := r.Read(1, 1, "k", 2, now(), 0); !ok || v != 2 {
		t.Fatalf("read after two writes: %d, %v; want 2, admitted", v, ok)
	}
	if _, ok := r.Read(2, 1, "other", 1, now(), 0); !ok {
		t.Fatal("token 1 refused on another key")
	}
	if _, ok := r.Read(2, 1, "k", 0, now(), 0); ok {
		t.Fatal("token 0 without a deadline was admitted")
	}
	want := []bool{true, true, false, true, true, true, true, false}
	ops := r.Ops()
	if len(ops) != len(want) {
		t.Fatalf("recorded %d ops, want %d: %+v", len(ops), len(want), ops)
	}
	for i, o := range ops {
		if o.Accepted != want[i] || o.Return < o.Call {
			t.Errorf("op %d: %+v; want accepted=%v and return after call", i, o, want[i])
		}
	}
	if vs, err := check.Check(ops, check.Options{Timeout: time.Minute}); err != nil || len(vs) != 0 {
		t.Fatalf("the resource's own history: %v, %v", vs, err)
	}
}

// Unfenced backends send the end of the holder's validity instead of a
// token: the resource applies what arrives before it and rejects, as late,
// what arrives after.
func TestResourceRejectsAnUnfencedOperationAfterItsDeadline(t *testing.T) {
	r := NewResource()
	future := now() + int64(time.Hour)
	if !r.Write(0, 1, "k", 0, 0, now(), future) {
		t.Fatal("unfenced write before its deadline was rejected")
	}
	if r.Write(1, 1, "k", 0, 1, now(), now()-1) {
		t.Fatal("unfenced write after its deadline was applied")
	}
	if v, ok := r.Read(0, 1, "k", 0, now(), future); !ok || v != 1 {
		t.Fatalf("unfenced read: %d, %v; want 1 (the late write changed nothing), applied", v, ok)
	}
	ops := r.Ops()
	if len(ops) != 3 || ops[0].Late || !ops[1].Late || ops[1].Accepted || ops[2].Late {
		t.Fatalf("recorded %+v; want the second op late and rejected, only", ops)
	}
}
