package redisdriver

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// The inbox is the driver's one pub/sub subscription, to its own channel, on
// which release.lua announces the locks it hands to this driver's waiters. It
// is opened by the first Acquire that has to wait and read by one goroutine
// until Close. Because the channel belongs to the driver rather than to a key,
// waiting on another key needs no SUBSCRIBE, and no release can slip in before
// a subscription for its key is confirmed.
type subscription struct {
	state    subState
	ready    chan struct{} // closed when a start attempt ends
	err      error         // why the last start attempt failed
	ps       *redis.PubSub
	resub    chan struct{} // closed and replaced each time the subscription comes back
	checking bool          // a checkHeld is running
}

type subState int

const (
	subNone subState = iota
	subStarting
	subRunning
)

const (
	// inboxDialTimeout bounds subscribing and its confirmation.
	inboxDialTimeout = 5 * time.Second
	// inboxIdle is how long the reader waits for a message before it pings the
	// server, and then for the answer before it gives the connection up.
	inboxIdle = 15 * time.Second
	// inboxBackoffMax caps the pause between attempts while the server is away.
	inboxBackoffMax = time.Second
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
				return err
			}
			d.sub.state, d.sub.ps = subRunning, ps
			close(ready)
			d.wg.Add(1)
			go d.readInbox(ps)
			d.mu.Unlock()
			return nil
		}
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

// readInbox delivers handoff messages until Close. go-redis reconnects a
// broken subscription by itself and subscribes again; the confirmation tells
// the reader that messages may have been lost meanwhile (and that the server
// may have restarted), so waiters look again and held locks are checked. A
// connection that fails silently (no answer to a ping) is replaced.
func (d *Driver) readInbox(ps *redis.PubSub) {
	defer d.wg.Done()
	pinged := false
	var backoff time.Duration
	for {
		msg, err := ps.ReceiveTimeout(d.ctx, inboxIdle)
		if d.ctx.Err() != nil {
			return
		}
		if err != nil {
			if !isTimeout(err) {
				backoff = min(max(2*backoff, 10*time.Millisecond), inboxBackoffMax)
				if !d.pause(backoff) {
					return
				}
				continue
			}
			if !pinged {
				pinged = true
				_ = ps.Ping(d.ctx)
				continue
			}
			if ps = d.redial(ps); ps == nil {
				return
			}
			pinged = false
			d.comeBack()
			continue
		}
		backoff, pinged = 0, false
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
		if !d.pause(backoff) {
			return nil
		}
		backoff = min(2*backoff, inboxBackoffMax)
	}
}

// pause sleeps for t and reports false if the driver was closed meanwhile.
func (d *Driver) pause(t time.Duration) bool {
	timer := time.NewTimer(t)
	defer timer.Stop()
	select {
	case <-d.ctx.Done():
		return false
	case <-timer.C:
		return true
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
