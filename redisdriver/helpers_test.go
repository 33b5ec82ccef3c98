package redisdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// openURL opens a driver as lock.Open would, with a client name of its own so
// that sever can find its connections.
func openURL(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("client_name", "distlock-test-"+randomHex(6))
	u.RawQuery = q.Encode()
	d, err := open(ctx, driver.Config{URL: u})
	if err != nil {
		return nil, err
	}
	return d.(*Driver), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// adminClient is a plain client of the server, playing the operator.
func adminClient(t testing.TB, rawURL string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sever does to d what an operator does to a client whose locks must go: it
// deletes every hold of d (see dropHold) and kills d's connections. d's
// process lives on and must notice.
func sever(ctx context.Context, admin *redis.Client, d *Driver) error {
	for _, req := range heldBy(d) {
		if err := dropHold(ctx, admin, d, req); err != nil {
			return err
		}
	}
	c, ok := d.client.(*redis.Client)
	if !ok {
		return nil
	}
	return killClients(ctx, admin, c.Options().ClientName)
}

// heldBy lists the requests d holds.
func heldBy(d *Driver) []*driver.Request {
	d.held.Lock()
	defer d.held.Unlock()
	var reqs []*driver.Request
	d.held.EachLocked(func(req *driver.Request, _ heldLock) { reqs = append(reqs, req) })
	return reqs
}

// dropHold deletes req's hold as an operator would: the lock key of an
// exclusive lock, the holder's own entry of a shared hold or a permit (the
// marker, which every holder of the key shares, stays).
func dropHold(ctx context.Context, admin *redis.Client, d *Driver, req *driver.Request) error {
	k := d.keys(req.Key)
	if shape(req) >= 0 {
		return admin.ZRem(ctx, k.Holders, req.Owner).Err()
	}
	return admin.Del(ctx, k.Lock).Err()
}

// killClients kills every connection whose client name is name.
func killClients(ctx context.Context, admin *redis.Client, name string) error {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(list, "\n") {
		var id, cname string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "name="); ok {
				cname = v
			}
		}
		if id != "" && cname == name {
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil && !strings.Contains(err.Error(), "No such client") {
				return fmt.Errorf("CLIENT KILL ID %s: %w", id, err)
			}
		}
	}
	return nil
}

// waitFor polls ok until it holds, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
