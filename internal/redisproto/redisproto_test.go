package redisproto

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEscapeLeavesNoBraceAndIsInjective(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "{a}": "%7Ba%7D", "%7B": "%257B", "é": "é"} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	if Escape("{") == Escape("%7B") {
		t.Error("Escape maps '{' and \"%7B\" to one name")
	}
}

func TestMillisRoundsUpToAtLeastOne(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, time.Microsecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Second: 1000} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}
