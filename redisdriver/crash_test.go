package redisdriver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// subscribed reports whether d's inbox subscription is up.
func (d *Driver) subscribed() bool {
	d.held.Lock()
	defer d.held.Unlock()
	return d.sub.state == subRunning
}

// A holder learns that the server crashed and came back without its locks as
// soon as its subscription is back, not at its next refresh: a driver that
// holds a lock keeps a pub/sub connection (even if it never waited), and
// checks its locks, run_id included, when that connection returns. The test
// kills the server (SIGKILL, no persistence) and starts it again empty, and
// then restarts it gracefully keeping its data (the key survives, the run_id
// changes): Lost() must close well before the first refresh (TTL/3 = 10s),
// and the time from the server's return to Lost() is logged.
func TestCrashIsReportedWhenTheServerReturns(t *testing.T) {
	for _, keepData := range []bool{false, true} {
		name := "killed, back empty"
		if keepData {
			name = "restarted, data kept"
		}
		t.Run(name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d, err := openURL(ctx, srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			lk := lock.New(d, lock.WithTTL(30*time.Second))
			defer lk.Close()
			const rounds = 5
			var sinceDown, sinceBack []time.Duration
			for i := range rounds {
				l, err := lk.TryAcquire(ctx, "nightly")
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, ctx, "the driver's subscription", d.subscribed)
				// When Lost() closes, taken by a goroutine that waits for it.
				lostAt := make(chan time.Time, 1)
				roundDone := make(chan struct{})
				go func() {
					select {
					case <-l.Lost():
						lostAt <- time.Now()
					case <-roundDone:
					}
				}()
				down := time.Now()
				if keepData {
					err = srv.Restart(true)
				} else {
					if err = srv.Kill(); err == nil {
						err = srv.Restart(false)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				back := time.Now()
				var lost time.Time
				select {
				case lost = <-lostAt:
				case <-time.After(5 * time.Second):
					close(roundDone)
					t.Fatalf("round %d: Lost() still open 5s after the server came back (the next refresh is 10s after the grant)", i+1)
				}
				close(roundDone)
				sinceDown = append(sinceDown, lost.Sub(down))
				sinceBack = append(sinceBack, lost.Sub(back))
				err = l.Release(ctx)
				if !errors.Is(err, lock.ErrLost) || (keepData && !errors.Is(err, ErrServerChanged)) {
					t.Fatalf("round %d: Release after the loss = %v, want ErrLost (with ErrServerChanged when the key survived)", i+1, err)
				}
			}
			slices.Sort(sinceDown)
			slices.Sort(sinceBack)
			// The server's return is when the test's readiness probe saw it
			// answer, which the driver's own reconnection may beat (a
			// negative figure).
			t.Logf("loss detection over %d rounds: from the server's return to Lost(): median %v, max %v; from the kill or stop: median %v, max %v",
				rounds, sinceBack[rounds/2].Round(time.Millisecond), sinceBack[rounds-1].Round(time.Millisecond),
				sinceDown[rounds/2].Round(time.Millisecond), sinceDown[rounds-1].Round(time.Millisecond))
		})
	}
}
