package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func w(client, hold int, token uint64, call, ret, read int64, ok bool) Op {
	return Op{Kind: Write, Client: client, Hold: hold, Key: "k", Token: token, Call: call, Return: ret, Value: read, Accepted: ok}
}

func props(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Property)
	}
	return strings.Join(s, ",")
}

func TestSequentialFencedHistoryHasNoViolation(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 1, Call: 0, Return: 1},
		w(0, 1, 1, 2, 3, 0, true),
		{Kind: Release, Client: 0, Hold: 1, Key: "k", Call: 4, Return: 5},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 2, Call: 3, Return: 6},
		w(1, 1, 2, 7, 8, 1, true),
		w(0, 2, 1, 9, 10, 0, false), // a stale holder is fenced off
		{Kind: Lost, Client: 1, Hold: 1, Key: "k", Call: 11, Return: 11},
	}
	vs, err := Check(h, Options{NoOverlap: true})
	if err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want no violation", vs, err)
	}
}

func TestLostUpdateIsNotLinearizableAndIsVisualised(t *testing.T) {
	dir := t.TempDir()
	// Two writes in sequence both read 0: the second lost the first's update.
	h := []Op{w(0, 1, 1, 0, 1, 0, true), w(1, 1, 2, 2, 3, 0, true)}
	vs, err := Check(h, Options{OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if props(vs) != "linearizable" || len(vs[0].Ops) == 0 {
		t.Fatalf("got %v; want one linearizability violation with its interleaving", vs)
	}
	if _, err := os.Stat(filepath.Join(dir, "linearizability.html")); err != nil {
		t.Fatalf("no visualisation: %v", err)
	}
}

func TestAcceptedStaleWriteIsReported(t *testing.T) {
	h := []Op{w(0, 1, 2, 0, 1, 0, true), w(1, 1, 1, 2, 3, 1, true)}
	vs, err := Check(h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := props(vs); got != "linearizable,no stale write" {
		t.Fatalf("got %q", got)
	}
}

func TestRepeatedTokenIsReported(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 5, Call: 0, Return: 1},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 5, Call: 2, Return: 3},
	}
	vs, _ := Check(h, Options{})
	if props(vs) != "tokens grow" {
		t.Fatalf("got %v", vs)
	}
}

func TestOverlappingHoldsAreReportedOnlyWhenCertain(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 1, Call: 0, Return: 1},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 2, Call: 2, Return: 3},
		{Kind: Release, Client: 0, Hold: 1, Key: "k", Call: 4, Return: 5},
		{Kind: Release, Client: 1, Hold: 1, Key: "k", Call: 6, Return: 7},
	}
	vs, _ := Check(h, Options{NoOverlap: true})
	if props(vs) != "no overlap" {
		t.Fatalf("got %v", vs)
	}
	// Release invoked before the other's grant returned: no certain overlap.
	h[2].Call, h[2].Return = 2, 2
	if vs, _ := Check(h, Options{NoOverlap: true}); len(vs) != 0 {
		t.Fatalf("got %v; want none", vs)
	}
}

func TestHoldEndsAtItsValidityWhenReleasedLate(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 1, Call: 0, Return: 1, ValidUntil: 3},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 2, Call: 2, Return: 4},
		{Kind: Release, Client: 0, Hold: 1, Key: "k", Call: 9, Return: 10},
		{Kind: Release, Client: 1, Hold: 1, Key: "k", Call: 6, Return: 7},
	}
	if vs, _ := Check(h, Options{NoOverlap: true}); len(vs) != 0 {
		t.Fatalf("got %v; want none", vs)
	}
	h[0].ValidUntil = 5
	if vs, _ := Check(h, Options{NoOverlap: true}); props(vs) != "no overlap" {
		t.Fatalf("got %v; want an overlap", vs)
	}
}

// A hold ends where its client decided to release (Releasing), though the
// Release never returned: the client was killed while retrying it.
func TestHoldEndsWhereItsClientDecidedToRelease(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Call: 0, Return: 1, ValidUntil: 100},
		{Kind: Releasing, Client: 0, Hold: 1, Key: "k", Call: 10, Return: 10},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Call: 20, Return: 21, ValidUntil: 120},
		{Kind: Crash, Client: 0, Call: 30, Return: 31},
	}
	if vs, _ := Check(h, Options{NoOverlap: true, Unfenced: true}); len(vs) != 0 {
		t.Fatalf("got %v; want none", vs)
	}
	// Without the decision the hold lasts until the kill.
	h = append(h[:1], h[2:]...)
	if vs, _ := Check(h, Options{NoOverlap: true, Unfenced: true}); props(vs) != "no overlap" {
		t.Fatalf("got %v; want an overlap", vs)
	}
}

func r(client, hold int, token uint64, call, ret, value int64, ok bool) Op {
	return Op{Kind: Read, Client: client, Hold: hold, Key: "k", Token: token, Call: call, Return: ret, Value: value, Accepted: ok}
}

// A holder paused between its read and its write is fenced off by the next
// holder's read: its late write is rejected and no update is lost.
func TestPausedWriterIsFencedByTheNextHoldersRead(t *testing.T) {
	h := []Op{
		r(0, 1, 1, 0, 1, 0, true),
		r(1, 1, 2, 2, 3, 0, true),
		w(0, 1, 1, 4, 5, 0, false),
		w(1, 1, 2, 6, 7, 0, true),
		r(2, 1, 3, 8, 9, 1, true),
	}
	if vs, err := Check(h, Options{}); err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want no violation", vs, err)
	}
	// A resource that fenced writes only would have accepted the paused
	// holder's write, and the next holder's write then lost it.
	h[2].Accepted = true
	h[4].Value = 1
	if vs, _ := Check(h, Options{}); props(vs) != "linearizable" {
		t.Fatalf("got %v; want the lost update reported", vs)
	}
}

// Two holders with one token both read and write: every write is accepted by
// the fence, and the model still sees the lost update.
func TestLostUpdateUnderARepeatedTokenIsNotLinearizable(t *testing.T) {
	h := []Op{
		r(0, 1, 4, 0, 1, 0, true),
		r(1, 1, 4, 0, 1, 0, true),
		w(0, 1, 4, 2, 3, 0, true),
		w(1, 1, 4, 2, 3, 0, true),
	}
	if vs, _ := Check(h, Options{}); props(vs) != "linearizable" {
		t.Fatalf("got %v; want a linearizability violation", vs)
	}
}

// A killed client's open hold ends at the kill: a later holder does not
// overlap it, and one before the kill does.
func TestCrashEndsTheKilledClientsHold(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 1, Call: 0, Return: 1, ValidUntil: 100},
		{Kind: Crash, Client: 0, Call: 5, Return: 5},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 2, Call: 6, Return: 7, ValidUntil: 100},
		{Kind: Release, Client: 1, Hold: 1, Key: "k", Call: 8, Return: 9},
	}
	if vs, _ := Check(h, Options{NoOverlap: true}); len(vs) != 0 {
		t.Fatalf("got %v; want none", vs)
	}
	h[1].Call, h[1].Return = 8, 8
	if vs, _ := Check(h, Options{NoOverlap: true}); props(vs) != "no overlap" {
		t.Fatalf("got %v; want an overlap before the kill", vs)
	}
}

// A refresh of another lock of the same client (one it failed to release)
// confirms nothing about the current hold.
func TestRefreshOfAnotherKeyDoesNotExtendAHold(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Token: 1, Call: 0, Return: 1, ValidUntil: 3},
		{Kind: Refresh, Client: 0, Hold: 1, Key: "other", Call: 2, Return: 2, ValidUntil: 9},
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Token: 2, Call: 4, Return: 5, ValidUntil: 9},
	}
	if vs, _ := Check(h, Options{NoOverlap: true}); len(vs) != 0 {
		t.Fatalf("got %v; want none", vs)
	}
	h[1].Key = "k"
	if vs, _ := Check(h, Options{NoOverlap: true}); props(vs) != "no overlap" {
		t.Fatalf("got %v; want the refreshed hold to overlap", vs)
	}
}

// Unfenced backends give token 0 to every holder: tokens are not compared,
// an operation rejected for its deadline has no effect, and a lost update is
// still caught.
func TestUnfencedHistoryIsCheckedByDeadlinesAndTheModel(t *testing.T) {
	h := []Op{
		{Kind: Acquire, Client: 0, Hold: 1, Key: "k", Call: 0, Return: 1, ValidUntil: 3},
		r(0, 1, 0, 1, 2, 0, true),
		{Kind: Acquire, Client: 1, Hold: 1, Key: "k", Call: 4, Return: 5, ValidUntil: 8},
		r(1, 1, 0, 5, 6, 0, true),
		{Kind: Write, Client: 0, Hold: 1, Key: "k", Call: 6, Return: 7, Value: 0, Late: true},
		w(1, 1, 0, 7, 8, 0, true),
	}
	if vs, err := Check(h, Options{NoOverlap: true, Unfenced: true}); err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want none", vs, err)
	}
	h[4].Late, h[4].Accepted = false, true
	if vs, _ := Check(h, Options{NoOverlap: true, Unfenced: true}); props(vs) != "linearizable" {
		t.Fatalf("got %v; want the late write's lost update", vs)
	}
}
