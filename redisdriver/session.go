package redisdriver

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// The inbox is the driver's one pub/sub subscription, to its own channel, on
// which release.lua announces the locks it hands to this driver's waiters. It
// is opened by the first Acquire that has to wait, or when the driver first
// holds a lock (it is also how a crash of the server is seen), and read by one
// goroutine until Close. Because the channel belongs to the driver rather than to a key,
// waiting on another key needs no SUBSCRIBE, and no release can slip in before
// a subscription for its key is confirmed.
type subscription struct {
	state    subState
	ready    chan struct{} // closed when a start attempt ends
	err      error         // why the last start attempt failed
	ps       *redis.PubSub
	resub    chan struct{} // closed and replaced each time the subscription comes back
	checking bool          // a checkHeld is running
	watched  bool          // watch has started (a lock was held)
}

type subState int

const (
	subNone subState = iota
	subStarting
	subRunning
)

const (
	// inboxDialTimeout bounds subscribing and its confirmation (a connection,
	// a handshake, SUBSCRIBE), and a ping of the subscription. It also bounds
	// how long Close waits for a subscription under way on a server that
	// stopped answering, when the driver does not own its client.
	inboxDialTimeout = time.Second
)

// subscribe makes sure the inbox is subscribed, starting it the first time.
func (d *Driver) subscribe(ctx context.Context) error {
	d.held.Lock()
	for {
		if d.held.ClosedLocked() {
			d.held.Unlock()
			return driver.ErrClosed
		}
		switch d.sub.state {
		case subRunning:
			d.held.Unlock()
			return nil
		case subStarting:
			ready := d.sub.ready
			d.held.Unlock()
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			d.held.Lock()
			if d.sub.state == subNone {
				err := d.sub.err
				d.held.Unlock()
				return err
			}
		default:
			d.sub.state = subStarting
			ready := make(chan struct{})
			d.sub.ready = ready
			d.wg.Add(1) // the dial, then the reader
			d.held.Unlock()
			ps, err := d.dialInbox(ctx)
			d.held.Lock()
			if err == nil && d.held.ClosedLocked() {
				_ = ps.Close()
				err = driver.ErrClosed
			}
			if err != nil {
				d.sub.state, d.sub.err = subNone, err
				close(ready)
				d.held.Unlock()
				d.wg.Done()
				return err
			}
			d.sub.state, d.sub.ps = subRunning, ps
			close(ready)
			go d.readInbox(ps)
			d.held.Unlock()
			return nil
		}
	}
}

// watch starts the inbox for a driver that holds a lock (record starts it
// once, in the background, with d.wg counting it), so that the driver has a
// connection that sees the server go away: when the subscription comes back,
// the held locks are checked at once (see wakeWaitersAndCheckHeld), rather than at their next
// refresh. A transient failure is tried again until the driver is closed; a
// permanent one (an ACL without SUBSCRIBE) leaves loss detection to the
// refreshes.
func (d *Driver) watch() {
	defer d.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		err := d.subscribe(d.ctx)
		if err == nil || !redisproto.IsTransient(err) || !redislayout.Pause(d.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, redislayout.InboxBackoffMax)
	}
}

// dialInbox subscribes to the inbox and waits for the server to confirm it, so
// that every handoff published afterwards reaches the driver.
func (d *Driver) dialInbox(ctx context.Context) (*redis.PubSub, error) {
	ctx, cancel := context.WithTimeout(ctx, inboxDialTimeout)
	defer cancel()
	ps := d.client.Subscribe(ctx, d.inbox)
	for {
		msg, err := ps.ReceiveTimeout(ctx, inboxDialTimeout)
		if err != nil {
			_ = ps.Close()
			return nil, err
		}
		if s, ok := msg.(*redis.Subscription); ok && s.Kind == "subscribe" && s.Channel == d.inbox {
			return ps, nil
		}
	}
}

// resubscribed returns a channel that is closed when the inbox next comes back
// after a loss of its connection.
func (d *Driver) resubscribed() <-chan struct{} {
	d.held.Lock()
	defer d.held.Unlock()
	return d.sub.resub
}

// readInbox delivers handoff messages until Close. When the connection fails
// (the server went away or restarted), or fails silently (no answer to a
// ping), the reader subscribes again on a new connection, within bounded
// deadlines (go-redis's own reconnection would wait without one); the
// confirmation tells it that messages may have been lost meanwhile and that
// the server may have restarted, so waiters look again and held locks are
// checked.
func (d *Driver) readInbox(ps *redis.PubSub) {
	defer d.wg.Done()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(d.ctx, redislayout.InboxIdle)
		if d.ctx.Err() != nil {
			return
		}
		if err != nil {
			if redislayout.IsNetTimeout(err) && !pinged {
				pinged = true
				ctx, cancel := context.WithTimeout(d.ctx, inboxDialTimeout)
				err = ps.Ping(ctx)
				cancel()
				if err == nil {
					continue
				}
			}
			if ps = d.redial(ps); ps == nil {
				return
			}
			pinged = false
			d.wakeWaitersAndCheckHeld()
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			d.deliver(m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.wakeWaitersAndCheckHeld()
			}
		}
	}
}

// redial replaces a dead subscription, retrying until it succeeds or the driver
// is closed (then it returns nil).
func (d *Driver) redial(old *redis.PubSub) *redis.PubSub {
	_ = old.Close()
	backoff := 10 * time.Millisecond
	for {
		ps, err := d.dialInbox(d.ctx)
		if err == nil {
			d.held.Lock()
			if d.held.ClosedLocked() {
				d.held.Unlock()
				_ = ps.Close()
				return nil
			}
			d.sub.ps = ps
			d.held.Unlock()
			return ps
		}
		if !redislayout.Pause(d.ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, redislayout.InboxBackoffMax)
	}
}

// wakeWaitersAndCheckHeld wakes every waiter to look again and checks the held locks.
func (d *Driver) wakeWaitersAndCheckHeld() {
	d.held.Lock()
	defer d.held.Unlock()
	close(d.sub.resub)
	d.sub.resub = make(chan struct{})
	if d.held.ClosedLocked() || d.sub.checking || d.held.LenLocked() == 0 {
		return
	}
	d.sub.checking = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.checkHeld()
		d.held.Lock()
		d.sub.checking = false
		d.held.Unlock()
	}()
}

// A node is the server that holds a lock's key, as the lock saw it when it was
// granted: its address (in a Cluster; "" otherwise, where the client has one
// primary) and its run_id, which a server draws at random each time it starts.
// A refresh that finds another node for the key has found the lock's server
// restarted or replaced.
type node struct {
	addr  string
	runID string
}

// A seenID is the run_id last read from a node, with the number of
// connections the driver's client had dialled before the INFO that read it
// was sent.
type seenID struct {
	id    string
	dials uint64
}

// grantedBy returns the node that has just granted a lock on lockKey (the
// reply, or the handoff message, has arrived).
//
// Every request travels on a connection, and a connection talks to the one
// server process that accepted it. When no connection was dialled since the
// cached run_id of the node was read (the dial counter is where it was before
// that INFO was sent), the grant travelled on a connection that was open
// before that INFO, to a process that was alive then and is alive now, so to
// the process that answered the INFO: the cached run_id is the granting
// server's, and the grant costs no extra round trip. Otherwise (a restart
// made the client dial again, or the pool grew) the run_id is read now. A
// restart within the few microseconds between the grant and that read would
// make the lock look granted by the new server; it then survived the restart
// in the server's data (a restart that loses the data loses the key, which
// every refresh checks), so only the "server changed" report is missed.
func (d *Driver) grantedBy(ctx context.Context, lockKey string) (node, error) {
	addr, c, counted, err := d.nodeClient(ctx, lockKey)
	if err != nil {
		return node{}, err
	}
	d.held.Lock()
	seen, ok := d.runIDs[addr]
	d.held.Unlock()
	if ok && counted && seen.dials == d.dialWatch.Dials() {
		return node{addr: addr, runID: seen.id}, nil
	}
	dials := d.dialWatch.Dials()
	id, err := runID(ctx, c)
	if err != nil {
		return node{}, err
	}
	d.sawRunID(addr, id, dials)
	return node{addr: addr, runID: id}, nil
}

// nodeClient returns the address and a client of the primary for lockKey,
// and whether the driver counts that client's dials.
func (d *Driver) nodeClient(ctx context.Context, lockKey string) (string, redis.Cmdable, bool, error) {
	if d.cluster == nil {
		return "", d.client, d.counted(d.client), nil
	}
	c, err := d.cluster.MasterForKey(ctx, lockKey)
	if err != nil {
		return "", nil, false, err
	}
	return c.Options().Addr, c, d.counted(c), nil
}

// sawRunID caches a node's run_id, read by an INFO sent when the driver had
// dialled dials connections.
func (d *Driver) sawRunID(addr, id string, dials uint64) {
	d.held.Lock()
	d.runIDs[addr] = seenID{id: id, dials: dials}
	d.held.Unlock()
}

// countDials installs the dial watch on client: on a *redis.Client (also a
// failover client) directly, on a *redis.ClusterClient on each node client it
// creates from now on. A node client created before (a ClusterClient given
// to New that had already served requests) is not counted, and a grant on it
// costs an INFO.
func (d *Driver) countDials(client redis.UniversalClient) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) {
			n.AddHook(d.dialWatch)
			d.countedClients.Store(n, true)
		})
	case *redis.Client:
		c.AddHook(d.dialWatch)
		d.countedClients.Store(c, true)
	}
}

func (d *Driver) counted(c redis.Cmdable) bool {
	_, ok := d.countedClients.Load(c)
	return ok
}

// runID asks a server for its run_id.
func runID(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if id, ok := redislayout.ParseRunID(info); ok {
		return id, nil
	}
	return "", errors.New("redisdriver: INFO server has no run_id")
}
