package redlockdriver

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/internal/redislayout"
)

// The inbox is the driver's pub/sub channel, subscribed once on each server
// (one connection per server), on which release.lua announces the release of a
// lock the driver registered as waiting for. The subscriptions start with the
// first Acquire that has to wait, or when the driver first holds a lock (they
// are also how it sees a server crash), and each is read by one goroutine
// until Close. Each time a subscription is confirmed (first, or after a
// reconnect) every waiting head looks again, since an announcement may have
// been missed, and the held locks are checked, since the server may have
// restarted without them (see held.go).
type subscription struct {
	started bool
	conns   []*redis.PubSub // by server; nil while dialling
	up      []bool          // confirmed, by server
	nup     int
}

const (
	// inboxDialRounds bounds subscribing and its confirmation, in per-server
	// timeouts: it takes a few round trips (connect, HELLO, SUBSCRIBE). A
	// server that does not answer within it is tried again later. go-redis
	// honours deadlines, not cancellation, while it connects, so this also
	// bounds how long Close waits for a subscription under way.
	inboxDialRounds = 10
)

// subscribe starts the subscriptions the first time, and reports whether a
// majority of them is confirmed.
func (d *Driver) subscribe() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.sub.started && !d.closed {
		d.sub.started = true
		d.wg.Add(len(d.servers))
		for _, s := range d.servers {
			go d.readInbox(s)
		}
	}
	return d.sub.nup >= d.quorum
}

// readInbox keeps s's subscription and delivers its announcements until Close.
func (d *Driver) readInbox(s *server) {
	defer d.wg.Done()
	backoff := 10 * time.Millisecond
	for d.ctx.Err() == nil {
		ps := d.dial(s)
		if ps == nil {
			if !redislayout.Pause(d.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, redislayout.InboxBackoffMax)
			continue
		}
		backoff = 10 * time.Millisecond
		d.read(s, ps)
		d.setUp(s.idx, false)
		_ = ps.Close()
	}
}

// dial subscribes on s and waits for the confirmation; nil if it failed. The
// connection is recorded before it is confirmed, so Close can interrupt it.
func (d *Driver) dial(s *server) *redis.PubSub {
	timeout := inboxDialRounds * d.timeout
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	ps := s.client.Subscribe(ctx, d.inbox)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = ps.Close()
		return nil
	}
	d.sub.conns[s.idx] = ps
	d.mu.Unlock()
	for {
		msg, err := ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			_ = ps.Close()
			return nil
		}
		if m, ok := msg.(*redis.Subscription); ok && m.Kind == "subscribe" && m.Channel == d.inbox {
			d.setUp(s.idx, true)
			return ps
		}
	}
}

// read delivers messages until the connection fails (it returns) or Close.
// go-redis reconnects a broken subscription by itself and subscribes again;
// its confirmation makes every waiter look again. A connection that fails
// silently (no answer to a ping) is given up.
func (d *Driver) read(s *server, ps *redis.PubSub) {
	pinged := false
	backoff := time.Duration(0)
	for {
		msg, err := ps.ReceiveTimeout(d.ctx, redislayout.InboxIdle)
		if d.ctx.Err() != nil {
			return
		}
		if err != nil {
			if !redislayout.IsNetTimeout(err) {
				d.setUp(s.idx, false)
				backoff = min(max(2*backoff, 10*time.Millisecond), redislayout.InboxBackoffMax)
				if !redislayout.Pause(d.ctx, backoff) {
					return
				}
				continue
			}
			if pinged {
				return
			}
			pinged = true
			_ = ps.Ping(d.ctx)
			continue
		}
		backoff, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Message:
			d.deliver(s.idx, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.setUp(s.idx, true)
			}
		}
	}
}

// setUp records whether server i's subscription is confirmed; a confirmation
// wakes every waiter to look again and checks the held locks.
func (d *Driver) setUp(i int, up bool) {
	d.mu.Lock()
	if d.sub.up[i] != up {
		d.sub.up[i] = up
		if up {
			d.sub.nup++
		} else {
			d.sub.nup--
		}
	}
	if up {
		d.backs.Add(1) // with up[i], so a check is known to be owed
	}
	d.mu.Unlock()
	if up {
		d.wakeAll()
		d.checkSoon()
	}
}

// closeInbox closes the subscriptions, interrupting their readers.
func (d *Driver) closeInbox() {
	d.mu.Lock()
	conns := append([]*redis.PubSub(nil), d.sub.conns...)
	d.mu.Unlock()
	for _, ps := range conns {
		if ps != nil {
			_ = ps.Close()
		}
	}
}
