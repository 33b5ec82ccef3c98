package run

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
	"github.com/distlock/lock/soak/check"
)

// undecidedRelease is a driver whose Release never learns its outcome, as a
// Redlock Release with a server frozen: it may have freed the lock on the
// servers it reached, but it cannot tell. At its first call it takes a copy
// of the history recorded so far, which is all a client killed then leaves.
type undecidedRelease struct {
	driver.Driver
	rec *Recorder

	once    sync.Once
	entered chan struct{}
	at      int64
	history []check.Op
}

func (d *undecidedRelease) Release(context.Context, *driver.Request) error {
	d.once.Do(func() {
		d.at, d.history = now(), d.rec.Ops()
		close(d.entered)
	})
	return driver.ErrUnavailable
}

// A client killed while its Release is retried ended its hold when it
// decided to release, and its history must say so: the first attempt may
// have let another client in (the soak's one Redlock "two holders" was such a
// history, a client killed between the attempts of a Release that a frozen
// server left undecided).
func TestHoldOfAClientKilledDuringItsReleaseEndsAtTheRelease(t *testing.T) {
	const ttl = 200 * time.Millisecond
	rec := &Recorder{}
	d := &undecidedRelease{Driver: memdriver.New(t.Name()), rec: rec, entered: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	record := func(o check.Op) {
		rec.Record(o)
		if o.Kind == check.Acquire {
			stop() // release at once: the client skips its hold's sleep and writes
		}
	}
	g := NewGate(d, 0, ttl, record)
	lk := lock.New(g, lock.WithTTL(ttl), lock.WithAutoRefresh(false))
	defer lk.Close()
	done := make(chan error, 1)
	go func() {
		done <- Client(ctx, lk, localStore{NewResource()}, ClientConfig{ID: 0, Keys: 1, TTL: ttl, Seed: 1, Record: record, Gate: g, Unfenced: true})
	}()
	select {
	case <-d.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the client never released its lock")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The client is killed during its Release; another client wins the lock
	// the first attempt freed.
	h := append(d.history,
		check.Op{Kind: check.Acquire, Client: 1, Hold: 1, Key: "soak-0", Call: d.at + 1, Return: d.at + 2, ValidUntil: d.at + int64(ttl)},
		check.Op{Kind: check.Crash, Client: 0, Call: d.at + 3, Return: d.at + 4},
	)
	vs, err := check.Check(h, check.Options{NoOverlap: true, Unfenced: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 0 {
		t.Fatalf("history of a client killed during its Release, then another holder: %v", vs)
	}
}
