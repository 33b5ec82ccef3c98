package redisdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
	"github.com/distlock/lock/internal/redislayout"
)

var _ driver.Inspector = (*Driver)(nil)

// Inspect implements driver.Inspector with one script (inspect.lua) that reads
// the lock key and its TTL, the holders' records, the live holders of a
// shared lock or semaphore, the fence record and the queue, by the server's
// clock.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := d.usable(ctx); err != nil {
		return driver.Info{}, err
	}
	k := d.keys(key)
	v, err := inspectScript.Run(ctx, d.client, scriptKeys(k)).Slice()
	if err != nil {
		return driver.Info{}, classify(err)
	}
	in, err := decodeInspect(v, k)
	if !d.fencing { // tokens mean nothing without fencing: report none
		in.Token = 0
		for i := range in.Holders {
			in.Holders[i].Token = 0
		}
	}
	return in, err
}

// decodeInspect reads a reply of inspect.lua.
func decodeInspect(v []any, k keys) (driver.Info, error) {
	bad := func() (driver.Info, error) {
		return driver.Info{}, fmt.Errorf("redisdriver: inspect script answered %v", v)
	}
	if len(v) == 1 && v[0] == int64(-1) {
		return driver.Info{}, fmt.Errorf("%w (key %q)", ErrWrongType, k.Lock)
	}
	if len(v) < 5 || (len(v)-5)%3 != 0 || v[0] != int64(1) {
		return bad()
	}
	fence, ok1 := v[2].(string)
	waiters, ok2 := v[3].(int64)
	n, ok3 := v[4].(int64)
	if !ok1 || !ok2 || !ok3 {
		return bad()
	}
	in := driver.Info{Waiters: int(waiters)}
	in.Token, _ = strconv.ParseUint(fence, 10, 64)
	if n >= 2 {
		in.Permits = int(n)
	}
	for i := 5; i < len(v); i += 3 {
		owner, ok1 := v[i].(string)
		exp, ok2 := v[i+1].(int64)
		rec, ok3 := v[i+2].(string)
		if !ok1 || !ok2 || !ok3 {
			return bad()
		}
		h := driver.Holder{Owner: owner, Shared: n == 0}
		if exp >= 0 {
			h.Expires = time.UnixMilli(exp)
		}
		if tok, us, label, ok := redislayout.ParseRecord(rec); ok {
			h.Token, h.Label = tok, label
			if us > 0 {
				h.Since = time.UnixMicro(us)
			}
		} else if n < 0 {
			// A lock without our record: a standard SET NX client's, whose
			// value is all there is to tell who holds it.
			h.Label = owner
		}
		in.Token = max(in.Token, h.Token)
		in.Holders = append(in.Holders, h)
	}
	slices.SortStableFunc(in.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return in, nil
}

var _ driver.Lister = (*Driver)(nil)

// List implements driver.Lister: SCAN MATCH for the lock keys under prefix
// (the only keys of the driver that end with a closing brace), on every
// primary of a Cluster.
func (d *Driver) List(ctx context.Context, prefix string) ([]string, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	pattern := redislayout.ScanPattern(d.prefix, prefix)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			names, next, err := c.ScanType(ctx, cursor, pattern, 1000, "string").Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, name := range names {
				if user, ok := redislayout.UserKey(d.prefix, name, prefix); ok {
					seen[user] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if d.cluster != nil {
		err = d.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, d.client)
	}
	if err != nil {
		return nil, classify(err)
	}
	listed := make([]string, 0, len(seen))
	for user := range seen {
		listed = append(listed, user)
	}
	slices.Sort(listed)
	return listed, nil
}

// A ForceRelease tombstone lives kit.TombstoneLife of what was left of the
// evicted holds' TTL: force.lua adds three times that to kit.TombstoneMin, so
// that their holders' refreshes, which come at least that often, read it.

var _ driver.Evictor = (*Driver)(nil)

// ForceRelease implements driver.Evictor with force.lua: the lock key and the
// holders' records go, the fence record is raised to the largest evicted
// token, each evicted owner gets a tombstone that makes its Refresh return
// driver.ErrNotHeld wrapping driver.ErrForceReleased, and the key is handed to
// its waiters as a release does.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	k := d.keys(key)
	all := scriptKeysWithForced(k)
	v, err := forceScript.Run(ctx, d.client, all, millis(kit.TombstoneMin)).Int64Slice()
	if err != nil {
		return 0, classify(err)
	}
	switch {
	case len(v) == 1 && v[0] == 0:
		return 0, driver.ErrNotHeld
	case len(v) == 1 && v[0] > 0:
		return int(v[0]), nil
	case len(v) == 1 && v[0] == acqWrongType:
		return 0, fmt.Errorf("%w (key %q)", ErrWrongType, k.Lock)
	case len(v) == 2 && v[0] == acqForeign && v[1] >= 1 && v[1] <= int64(len(all)):
		return 0, fmt.Errorf("%w: key %q", ErrForeignData, all[v[1]-1])
	}
	return 0, fmt.Errorf("redisdriver: force-release script answered %v", v)
}

var _ driver.Labeler = (*Driver)(nil)

// Relabel implements driver.Labeler: an owner-checked rewrite of the label
// in the holder's record, which keeps its token and grant time.
func (d *Driver) Relabel(ctx context.Context, req *driver.Request, label string) error {
	if err := d.usable(ctx); err != nil {
		return err
	}
	n, err := relabelScript.Run(ctx, d.client, scriptKeysWithForced(d.keys(req.Key)), req.Owner, label, shape(req)).Int64()
	switch {
	case err != nil:
		return classify(err)
	case n == 0:
		return driver.ErrNotHeld
	case n == 2:
		return errForced
	}
	return nil
}

const (
	// watchTTL is how long a key stays watched without renewal; a watcher
	// renews it every third of that.
	watchTTL = 30 * time.Second
	// watchRetry is the pause before a watcher tries again after its
	// connection failed.
	watchRetry = 100 * time.Millisecond
)

var _ driver.Watcher = (*Driver)(nil)

// Watch implements driver.Watcher. While the watchers' deadline in P:{K}:labels
// has not passed, the scripts that grant, release, force-release or relabel K
// publish on the channel P:{K}:watch; Watch subscribes to it on a connection
// of its own, then sets the deadline watchTTL ahead, and renews it every third
// of that until ctx ends. Outside a Cluster that connection also has
// client-side tracking in broadcasting mode for the prefix P:{K} (see
// trackingClient), so that every write, deletion or expiry of the lock key
// signals, whoever made it: TryAcquire without fencing (a bare SET NX PX)
// publishes nothing. A signal also comes when the subscription is made again
// after its connection failed (changes may have been missed meanwhile).
func (d *Driver) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	k := d.keys(key)
	d.held.Lock()
	if d.held.ClosedLocked() {
		d.held.Unlock()
		return nil, driver.ErrClosed
	}
	d.wg.Add(1)
	d.held.Unlock()
	tc := d.trackingClient(k)
	closeClient := func() {
		if tc != nil {
			_ = tc.Close()
		}
	}
	ps, err := d.subscribeWatch(ctx, tc, k.Watch)
	if err == nil {
		err = d.markWatched(ctx, k)
		if err != nil {
			_ = ps.Close()
		}
	}
	if err != nil {
		closeClient()
		d.wg.Done()
		return nil, classify(err)
	}
	c := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(d.ctx, cancel)
	// Closing the subscription ends a Receive under way at once.
	closeOnEnd := context.AfterFunc(wctx, func() { _ = ps.Close() })
	go func() {
		defer d.wg.Done()
		defer close(c)
		defer cancel()
		defer stop()
		defer closeOnEnd()
		defer closeClient()
		defer ps.Close()
		d.readWatch(wctx, ps, k, c)
	}()
	return c, nil
}

// invalidations is the channel on which a RESP2 connection that redirects
// client-side tracking to itself receives the names of the keys changed.
const invalidations = "__redis__:invalidate"

// trackingClient returns a client of its own for a watch of k, whose every
// connection (the watch's one, and the one go-redis dials again after a
// failure, before it subscribes again) turns on client-side tracking in
// broadcasting mode for the prefix of k's lock key (P:{K}, which only K's
// own keys begin with, braces being escaped in K), redirected to itself:
// from then on the server reports every key under the prefix that is
// written, deleted or expires, by whatever client, on invalidations once
// the connection has subscribed to it. It speaks RESP2, where those reports
// are pub/sub messages that go-redis reads (on RESP3 they are push
// messages). The client copies the driver's client's options (a failover
// client's dialer follows the current primary) and calls its OnConnect
// first.
//
// In a Cluster it returns nil: tracking reports the keys of the node the
// connection talks to, and a slot that moves to another node (resharding, a
// failover) would leave the watch on the old one; there the watch relies on
// the scripts' messages, and TryAcquire without fencing reads the watchers'
// deadline itself (see tryPlain).
func (d *Driver) trackingClient(k keys) *redis.Client {
	c, ok := d.client.(*redis.Client)
	if !ok || d.cluster != nil {
		return nil
	}
	o := *c.Options()
	user := o.OnConnect
	o.Protocol = 2
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 0, 0
	prefix := k.Lock
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			return err
		}
		return cn.Do(ctx, "client", "tracking", "on", "redirect", id, "bcast", "prefix", prefix).Err()
	}
	return redis.NewClient(&o)
}

// markWatched makes the scripts that change k's holders publish for watchTTL.
func (d *Driver) markWatched(ctx context.Context, k keys) error {
	return watchScript.Run(ctx, d.client, []string{k.Labels}, millis(watchTTL)).Err()
}

// subscribeWatch subscribes to channel, and with a tracking client tc (see
// trackingClient) to its invalidations too, on a connection of its own, and
// waits for the server to confirm every subscription.
func (d *Driver) subscribeWatch(ctx context.Context, tc *redis.Client, channel string) (*redis.PubSub, error) {
	sctx, cancel := context.WithTimeout(ctx, inboxDialTimeout)
	defer cancel()
	var ps *redis.PubSub
	want := map[string]bool{channel: true}
	if tc != nil {
		ps = tc.Subscribe(sctx, channel, invalidations)
		want[invalidations] = true
	} else {
		ps = d.client.Subscribe(sctx, channel)
	}
	for len(want) > 0 {
		msg, err := ps.ReceiveTimeout(sctx, inboxDialTimeout)
		if err != nil {
			_ = ps.Close()
			return nil, err
		}
		if s, ok := msg.(*redis.Subscription); ok && s.Kind == "subscribe" {
			delete(want, s.Channel)
		}
	}
	return ps, nil
}

// readWatch signals c for every message on the watch channel and every
// renewed subscription, and renews the marker, until ctx ends.
func (d *Driver) readWatch(ctx context.Context, ps *redis.PubSub, k keys, c chan<- struct{}) {
	signal := func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	renew := time.Now().Add(watchTTL / 3)
	for {
		wait := time.Until(renew)
		if wait <= 0 {
			rctx, cancel := context.WithTimeout(ctx, inboxDialTimeout)
			err := d.markWatched(rctx, k)
			cancel()
			if err == nil {
				renew = time.Now().Add(watchTTL / 3)
			} else {
				renew = time.Now().Add(watchRetry)
			}
			continue
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !redislayout.IsNetTimeout(err) {
				// A message go-redis cannot read is a tracking report of a
				// flush (no key names): a change. Otherwise the connection
				// failed: go-redis reconnects and subscribes again on the
				// next Receive, and the confirmation signals too.
				signal()
				t := time.NewTimer(watchRetry)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel != invalidations || invalidates(m.PayloadSlice, k.Lock) {
				signal()
			}
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// Back after a broken connection: the server may have
				// restarted without the deadline, so it is written at once.
				renew = time.Now()
				signal()
			}
		}
	}
}

// invalidates reports whether a tracking report of the keys changed concerns
// the lock key: the exclusive holder's changes (the scripts' other changes
// are announced on the watch channel). No names means a flush.
func invalidates(changed []string, lockKey string) bool {
	if len(changed) == 0 {
		return true
	}
	for _, name := range changed {
		if name == lockKey {
			return true
		}
	}
	return false
}
