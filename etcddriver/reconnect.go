package etcddriver

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// watchConnection is the Driver's goroutine that notices when the client's
// connection to etcd is ready again after it was not (a server restart, a
// network outage, a switch to another member) and has every session send a
// keepalive at once. That keepalive is what tells a server that came back
// without its data from one that kept it: the first answers that the lease is
// gone, and the session's locks are lost within a round trip of reconnecting
// instead of at the next scheduled keepalive or refresh (a third of the TTL).
// The second confirms the lease, and nothing is lost.
func (d *Driver) watchConnection(cc *grpc.ClientConn) {
	defer d.wg.Done()
	state := cc.GetState()
	for cc.WaitForStateChange(d.ctx, state) {
		// Any change that ends in Ready is a reconnection, even one whose
		// intermediate states came and went before this goroutine looked.
		state = cc.GetState()
		if state == connectivity.Ready {
			d.kickSessions()
		}
	}
}

// kickSessions asks every session for a keepalive now.
func (d *Driver) kickSessions() {
	d.held.Lock()
	defer d.held.Unlock()
	for _, s := range d.leases {
		select {
		case s.kick <- struct{}{}:
		default: // one is pending already
		}
	}
}
