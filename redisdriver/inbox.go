package redisdriver

import (
	"context"
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
	d.mu.Lock()
	for {
		if d.closed {
			d.mu.Unlock()
			return driver.ErrClosed
		}
		switch d.sub.state {
		case subRunning:
			d.mu.Unlock()
			return nil
		case subStarting:
			ready := d.sub.ready
			d.mu.Unlock()
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			d.mu.Lock()
			if d.sub.state == subNone {
				err := d.sub.err
				d.mu.Unlock()
				return err
			}
		default:
			d.sub.state = subStarting
			ready := make(chan struct{})
			d.sub.ready = ready
			d.wg.Add(1) // the dial, then the reader
			d.mu.Unlock()
			ps, err := d.dialInbox(ctx)
			d.mu.Lock()
			if err == nil && d.closed {
				_ = ps.Close()
				err = driver.ErrClosed
			}
			if err != nil {
				d.sub.state, d.sub.err = subNone, err
				close(ready)
				d.mu.Unlock()
				d.wg.Done()
				return err
			}
			d.sub.state, d.sub.ps = subRunning, ps
			close(ready)
			go d.readInbox(ps)
			d.mu.Unlock()
			return nil
		}
	}
}

// watch starts the inbox for a driver that holds a lock (record starts it
// once, in the background, with d.wg counting it), so that the driver has a
// connection that sees the server go away: when the subscription comes back,
// the held locks are checked at once (see comeBack), rather than at their next
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
	d.mu.Lock()
	defer d.mu.Unlock()
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
			d.comeBack()
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			d.deliver(m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.comeBack()
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
			d.mu.Lock()
			if d.closed {
				d.mu.Unlock()
				_ = ps.Close()
				return nil
			}
			d.sub.ps = ps
			d.mu.Unlock()
			return ps
		}
		if !redislayout.Pause(d.ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, redislayout.InboxBackoffMax)
	}
}

// comeBack wakes every waiter to look again and checks the held locks.
func (d *Driver) comeBack() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.sub.resub)
	d.sub.resub = make(chan struct{})
	if d.closed || d.sub.checking || len(d.held) == 0 {
		return
	}
	d.sub.checking = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.checkHeld()
		d.mu.Lock()
		d.sub.checking = false
		d.mu.Unlock()
	}()
}
