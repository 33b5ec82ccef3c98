package harness

import (
	"testing"
	"time"
)

func TestKillDelayFallsAnywhereInOneTTLAfterTheStandbyStarts(t *testing.T) {
	const ttl = 2 * time.Second
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 1000 {
		d := killDelay(ttl)
		if d < standbyStart || d >= standbyStart+ttl {
			t.Fatalf("killDelay = %v, want in [%v, %v)", d, standbyStart, standbyStart+ttl)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	// 1000 uniform draws leave no tenth of the TTL uncovered at either end
	// but with probability 2×0.9^1000: the kill's phase does vary.
	if lo > standbyStart+ttl/10 || hi < standbyStart+ttl*9/10 {
		t.Errorf("killDelay spans %v–%v over 1000 draws, want most of [%v, %v)", lo, hi, standbyStart, standbyStart+ttl)
	}
	if d := killDelay(0); d != standbyStart {
		t.Errorf("killDelay(0) = %v, want %v", d, standbyStart)
	}
}
