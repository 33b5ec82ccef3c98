package zkdriver

import (
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// Internals for the external tests.
var (
	EscapeName  = escapeName
	Sequence    = sequence
	Predecessor = predecessor
	ParseURL    = parseURL
	Unavailable = unavailable
)

// Root returns the path of the node under which every key's lock lives (the
// chroot, then the escaped prefix), for tests that look at the nodes there.
func (d *Driver) Root() string { return d.root }

// SessionForTest returns the live session's id, password and negotiated
// timeout, as the last connect handshake gave them (Open only).
func (d *Driver) SessionForTest() (id int64, passwd []byte, timeout time.Duration) {
	d.held.Lock()
	defer d.held.Unlock()
	return d.session.id, d.session.passwd, d.session.timeout
}

// Servers returns the URL config's servers, for tests of parseURL.
func (c urlConfig) Servers() []string { return c.servers }

// Chroot returns the URL config's chroot.
func (c urlConfig) Chroot() string { return c.chroot }

// SessionTimeout returns the URL config's session timeout.
func (c urlConfig) SessionTimeout() time.Duration { return c.sessionTimeout }

// SessionTap returns a go-zookeeper dialer for a connection a test makes
// itself, and a function that tells the session its last handshake gave.
func SessionTap() (dial func(network, address string, timeout time.Duration) (net.Conn, error), session func() (int64, []byte, time.Duration)) {
	d := newDriver("", DefaultPrefix, nil)
	return d.dialTap, func() (int64, []byte, time.Duration) {
		d.held.Lock()
		defer d.held.Unlock()
		return d.session.id, d.session.passwd, d.session.timeout
	}
}

// RequestsForTest counts the requests the driver has written on its own
// connections, pings aside.
func (d *Driver) RequestsForTest() int64 { return d.wire.requests.Load() }

// WatchedForTest reports whether req's lock is held with a watch on its node.
func (d *Driver) WatchedForTest(req *driver.Request) bool {
	d.held.Lock()
	defer d.held.Unlock()
	h := d.held.GetLocked(holdKey{req.Key, req.Owner})
	return h != nil && h.state == stateGranted && h.watched
}

// ConnStateForTest returns the state of the driver's go-zookeeper connection.
func (d *Driver) ConnStateForTest() zk.State { return d.conn.State() }

// SetShareWaitForTest sets the longest a refresh batch waits for a shared
// read to go out (maxShareWait).
func (d *Driver) SetShareWaitForTest(w time.Duration) { d.shareWait = w }

// SetTombstoneLifeForTest shortens how long ForceRelease keeps tombstones
// nobody read.
func (d *Driver) SetTombstoneLifeForTest(life time.Duration) { d.tombLife = life }

// Label encoding, for the internal format's tests.
var (
	WithToken  = withToken
	SplitToken = splitToken
)

// HeldForTest counts the locks held, and of them those with a watch on their
// node.
func (d *Driver) HeldForTest() (held, watched int) {
	d.held.Lock()
	defer d.held.Unlock()
	for _, h := range d.byPath {
		if h.state == stateGranted {
			held++
			if h.watched {
				watched++
			}
		}
	}
	return held, watched
}

// RoundOpenForTest reports whether a shared confirmation read is waiting to
// be sent.
func (d *Driver) RoundOpenForTest() bool {
	return d.rounds.Pending()
}
