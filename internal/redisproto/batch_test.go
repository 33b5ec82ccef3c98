package redisproto

import (
	"slices"
	"testing"
)

func TestCodesReadsOneIntegerPerLockAndRefusesAnyOtherAnswer(t *testing.T) {
	got, err := Codes([]any{int64(1), int64(0), int64(2)}, 3)
	if err != nil || !slices.Equal(got, []int64{1, 0, 2}) {
		t.Errorf("Codes = %v, %v; want [1 0 2]", got, err)
	}
	for _, bad := range []struct {
		v any
		n int
	}{
		{"OK", 1},                      // not a list
		{[]any{int64(1)}, 2},           // too few
		{[]any{int64(1), int64(1)}, 1}, // too many
		{[]any{int64(1), "x"}, 2},      // not an integer
		{[]any(nil), 1},                // empty
	} {
		if got, err := Codes(bad.v, bad.n); err == nil {
			t.Errorf("Codes(%#v, %d) = %v, want an error", bad.v, bad.n, got)
		}
	}
}
