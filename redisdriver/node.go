package redisdriver

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/internal/redislayout"
)

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
	d.mu.Lock()
	seen, ok := d.runIDs[addr]
	d.mu.Unlock()
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
	d.mu.Lock()
	d.runIDs[addr] = seenID{id: id, dials: dials}
	d.mu.Unlock()
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
	return "", fmt.Errorf("redisdriver: INFO server has no run_id")
}
