package redisdriver

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
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

// node returns the node for a lock key, from the cache of run_ids seen or, the
// first time, by asking the server.
func (d *Driver) node(ctx context.Context, lockKey string) (node, error) {
	addr, c, err := d.nodeClient(ctx, lockKey)
	if err != nil {
		return node{}, err
	}
	d.mu.Lock()
	id := d.runIDs[addr]
	d.mu.Unlock()
	if id == "" {
		if id, err = runID(ctx, c); err != nil {
			return node{}, err
		}
		d.sawRunID(addr, id)
	}
	return node{addr: addr, runID: id}, nil
}

// nodeClient returns the address and a client of the primary for lockKey.
func (d *Driver) nodeClient(ctx context.Context, lockKey string) (string, redis.Cmdable, error) {
	if d.cluster == nil {
		return "", d.client, nil
	}
	c, err := d.cluster.MasterForKey(ctx, lockKey)
	if err != nil {
		return "", nil, err
	}
	return c.Options().Addr, c, nil
}

func (d *Driver) sawRunID(addr, id string) {
	d.mu.Lock()
	d.runIDs[addr] = id
	d.mu.Unlock()
}

// runID asks a server for its run_id.
func runID(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return parseRunID(info)
}

func parseRunID(info string) (string, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			if v = strings.TrimSpace(v); v != "" {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("redisdriver: INFO server has no run_id")
}
