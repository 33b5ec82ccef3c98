package redisproto

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// Each server answer is classed by its error code: the transient ones match
// driver.ErrUnavailable, the others stay permanent. The answers come from a
// real server (a script's error_reply is sent to the client as any error
// reply is), and so do the network failures.
func TestServerAnswersAreClassedByTheirCode(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	o.MaxRetries = -1
	c := redis.NewClient(o)
	defer c.Close()
	for code, transient := range map[string]bool{
		"LOADING": true, "TRYAGAIN": true, "CLUSTERDOWN": true, "MASTERDOWN": true,
		"READONLY": true, "BUSY": true, "NOREPLICAS": true,
		"WRONGTYPE": false, "NOAUTH": false, "WRONGPASS": false, "NOPERM": false,
		"NOSCRIPT": false, "ERR": false, "LOADINGX": false, "BUSYKEY": false,
	} {
		err := c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, code+" said the server").Err()
		if err == nil {
			t.Fatalf("the script answered no error for %s", code)
		}
		got := Classify(err)
		if errors.Is(got, driver.ErrUnavailable) != transient {
			t.Errorf("Classify(%q) = %v; transient: %v, want %v", err, got, !transient, transient)
		}
		if !errors.Is(got, err) {
			t.Errorf("Classify(%q) = %v lost the server's error", err, got)
		}
	}
	// A wrong type, as the server itself says it.
	if err := c.RPush(ctx, "list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := Classify(c.Get(ctx, "list").Err()); err == nil || errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("GET of a list: Classify = %v, want a permanent error", err)
	}
	// A server that went away.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := Classify(c.Ping(ctx).Err()); !errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("PING of a stopped server: Classify = %v, want ErrUnavailable", err)
	}
}
