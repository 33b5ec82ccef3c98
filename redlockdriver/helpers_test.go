package redlockdriver

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// redlockURL is the redlock URL of servers, with extra parameters.
func redlockURL(servers []*testserver.Server, extra ...string) string {
	q := make([]string, 0, len(servers)+len(extra))
	for _, s := range servers {
		q = append(q, "server="+url.QueryEscape(s.URL()))
	}
	return "redlock://?" + strings.Join(append(q, extra...), "&")
}

// openURL opens a driver as lock.Open would.
func openURL(ctx context.Context, rawURL string) (*Driver, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	d, err := open(ctx, driver.Config{URL: u})
	if err != nil {
		return nil, err
	}
	return d.(*Driver), nil
}

// admins are plain clients of the servers, playing the operator.
func admins(t testing.TB, servers []*testserver.Server) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(servers))
	for i, s := range servers {
		o, err := redis.ParseURL(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = redis.NewClient(o)
		t.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}

// tracked is a Driver that remembers the locks it holds, so that a test can
// play an operator deleting exactly them.
type tracked struct {
	*Driver
	mu   sync.Mutex
	held map[*driver.Request]bool
}

func track(d *Driver) *tracked { return &tracked{Driver: d, held: map[*driver.Request]bool{}} }

func (t *tracked) note(req *driver.Request, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if held {
		t.held[req] = true
	} else {
		delete(t.held, req)
	}
}

func (t *tracked) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := t.Driver.TryAcquire(ctx, req)
	if err == nil {
		t.note(req, true)
	}
	return g, err
}

func (t *tracked) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := t.Driver.Acquire(ctx, req)
	if err == nil {
		t.note(req, true)
	}
	return g, err
}

func (t *tracked) TryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	gs, err := t.Driver.TryAcquireSet(ctx, reqs)
	for _, req := range reqs {
		t.note(req, err == nil)
	}
	return gs, err
}

func (t *tracked) Release(ctx context.Context, req *driver.Request) error {
	err := t.Driver.Release(ctx, req)
	if err == nil || isNotHeld(err) {
		t.note(req, false)
	}
	return err
}

// settle waits until every request d sent before has been answered by its
// server or dropped: a round that ended at a majority leaves its other
// requests running, and a lock taken by them lands a little later. Each
// server's worker serves its jobs in order, so a PING queued behind them is
// answered after them.
func (d *Driver) settle() {
	r := d.send(opPing, time.Now().Add(10*time.Second), 1, func(int) ([]string, []any) { return nil, nil })
	for {
		if _, ok := r.next(); !ok {
			return
		}
	}
}

// locks returns the lock keys and owners of the locks t holds.
func (t *tracked) locks() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for req := range t.held {
		out[t.keys(req.Key).Lock] = req.Owner
	}
	return out
}

// deleteOwned deletes, on each of the given servers, the lock keys that still
// hold their owner, and the owners' shared holds (the marker with the last).
func deleteOwned(ctx context.Context, admins []*redis.Client, locks map[string]string) error {
	for _, a := range admins {
		for key, owner := range locks {
			v, err := a.Get(ctx, key).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				return err
			}
			switch v {
			case owner:
				err = a.Del(ctx, key).Err()
			case sharedMarker:
				err = a.ZRem(ctx, key+":holders", owner).Err()
				if n, cerr := a.ZCard(ctx, key+":holders").Result(); err == nil && cerr == nil && n == 0 {
					err = a.Del(ctx, key).Err()
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// residue lists every key under prefix on the servers that answer.
func residue(ctx context.Context, t testing.TB, admins []*redis.Client, prefix string) []string {
	t.Helper()
	var out []string
	for i, a := range admins {
		if a.Ping(ctx).Err() != nil {
			continue
		}
		iter := a.Scan(ctx, 0, prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			out = append(out, "server "+string(rune('1'+i))+": "+iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN on server %d: %v", i+1, err)
		}
	}
	return out
}

func isNotHeld(err error) bool {
	return err != nil && strings.Contains(err.Error(), driver.ErrNotHeld.Error())
}

// userURL makes the user locker (password pw) on each server, with the ACL
// rules that rules gives for that server, and returns the Redlock URL that
// connects as it.
func userURL(ctx context.Context, t testing.TB, servers []*testserver.Server, admin []*redis.Client, rules func(server int) []any) string {
	t.Helper()
	q := make([]string, len(servers))
	for i, a := range admin {
		acl := append([]any{"ACL", "SETUSER", "locker", "on", ">pw"}, rules(i)...)
		if err := a.Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
		q[i] = "server=" + strings.Replace(servers[i].URL(), "redis://", "redis%3A%2F%2Flocker%3Apw%40", 1)
	}
	return "redlock://?" + strings.Join(q, "&")
}
