package redisdriver

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/internal/waketest"
)

// A holder that stops refreshing sends no handoff: its lock ends by its TTL on
// the server, and the waiter finds it free by its own timer at the TTL's end,
// a wake-up it reports as the timer's.
func TestWaiterWokenByHolderTTLEndReportsTimer(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d1, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := openURL(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	waketest.CheckHolderTTLEndWakesByTimer(t, ctx, d1, d2, "k", 200*time.Millisecond)
}
