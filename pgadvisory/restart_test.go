package pgadvisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// A waiter outlives a server restart shorter than its context: it keeps
// waiting through the outage (the portable layer retries what the driver
// reports as ErrUnavailable) and gets the lock, whose previous holder's
// session the restart ended.
func TestWaiterSurvivesAServerRestartShorterThanItsContext(t *testing.T) {
	srv := testserver.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder := lock.New(mustOpen(t, srv.URL()))
	defer holder.Close()
	_, waiter := openDriver(t, srv.URL())
	key := t.Name()
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key)
		got <- result{l, err}
	}()
	waitQueued(t, srv.URL(), pgadvisory.LockID(pgadvisory.DefaultPrefix, key), 1)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	const outage = 5 * time.Second
	select {
	case r := <-got:
		t.Fatalf("Acquire returned during the outage: %v", r.err)
	case <-time.After(outage): // the outage lasts this long
	}
	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire after the restart: %v", r.err)
		}
		if r.l.Token() <= held.Token() {
			t.Errorf("token %d after the restart, not greater than the old holder's %d", r.l.Token(), held.Token())
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire did not get the lock within 30s of the restart")
	}
	select {
	case <-held.Lost():
	default:
		t.Error("the old holder's lock, ended by the restart, is not reported lost")
	}
}
