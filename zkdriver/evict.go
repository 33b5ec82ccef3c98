package zkdriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
)

// forcedNode is the persistent node under the root in which ForceRelease
// leaves its tombstones; its leading '.' keeps it apart from key nodes.
const forcedNode = ".forced"

// A tombstone its holder never read (the holder's driver closed first) is
// kept for d.tombLife, kit.TombstoneLife of a TTL the evicting driver cannot
// know (a node does not record its holder's TTL); the next ForceRelease
// deletes older ones. An evicted holder reads its tombstone as soon as its
// watch or its next refresh finds its node gone: well within this.

// tombstone is the path of the tombstone of the held node at path.
func (d *Driver) tombstone(path string) string {
	return d.root + "/" + forcedNode + "/" + escapeName(strings.TrimPrefix(path, d.root+"/"))
}

// errForced is the loss of a lock whose node ForceRelease deleted.
var errForced = fmt.Errorf("%w: the lock node was deleted by ForceRelease (%w)", driver.ErrNotHeld, driver.ErrForceReleased)

// maxForceAttempts bounds ForceRelease's retries when holders change under it.
const maxForceAttempts = 8

// ForceRelease implements driver.Evictor. In one transaction it deletes the
// holders' nodes (an operator may delete another session's ephemeral nodes)
// and creates a tombstone for each, which the evicted holder's driver
// deletes when it finds its node gone, and so reports driver.ErrForceReleased.
// The next grant's token is a later zxid than the deletions, so larger than
// every evicted holder's.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if d.isClosed() {
		return 0, driver.ErrClosed
	}
	keyNode := d.LockPath(key)
	for attempt := 1; ; attempt++ {
		v, err := d.look(ctx, keyNode)
		if err != nil {
			return 0, unavailable(d.closedOr(err))
		}
		if len(v.holders) == 0 {
			return 0, driver.ErrNotHeld
		}
		if err := d.ensureForced(ctx); err != nil {
			return 0, unavailable(d.closedOr(err))
		}
		data := []byte("distlock force-release at " + time.Now().UTC().Format(time.RFC3339Nano))
		ops := make([]any, 0, 2*len(v.holders))
		for _, p := range v.holders {
			ops = append(ops,
				&zk.CreateRequest{Path: d.tombstone(p), Data: data, Acl: d.acl},
				&zk.DeleteRequest{Path: p, Version: -1})
		}
		res, err := call(d, ctx, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) }, nil)
		if err == nil {
			d.sweepTombstones(ctx)
			return len(v.holders), nil
		}
		if attempt >= maxForceAttempts || !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNodeExists) {
			return 0, unavailable(d.closedOr(fmt.Errorf("zkdriver: force release: %w", err)))
		}
		// A holder went (look again), or a tombstone of an earlier eviction
		// of a node of the same name (a foreign client's unprotected names
		// repeat) is in the way: delete it.
		for i, r := range res {
			if i%2 == 0 && errors.Is(r.Error, zk.ErrNodeExists) {
				_ = d.deleteNode(ctx, ops[i].(*zk.CreateRequest).Path)
			}
		}
	}
}

// ensureForced makes the tombstones' node where missing.
func (d *Driver) ensureForced(ctx context.Context) error {
	p := d.root + "/" + forcedNode
	if d.knownParent(p) {
		return nil
	}
	_, err := call(d, ctx, func() (string, error) { return d.conn.Create(p, nil, 0, d.acl) }, nil)
	if errors.Is(err, zk.ErrNoNode) {
		if err = d.ensureRoot(ctx); err == nil {
			_, err = call(d, ctx, func() (string, error) { return d.conn.Create(p, nil, 0, d.acl) }, nil)
		}
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	d.rememberParent(p)
	return nil
}

// sweepTombstones deletes tombstones older than d.tombLife (by the
// server's clock, against the newest one's creation), best effort.
func (d *Driver) sweepTombstones(ctx context.Context) {
	dir := d.root + "/" + forcedNode
	names, _, err := d.children(ctx, dir)
	if err != nil || len(names) < 2 {
		return
	}
	ctimes := make([]int64, len(names))
	each(len(names), func(i int) {
		if nd, err := d.get(ctx, dir+"/"+names[i]); err == nil {
			ctimes[i] = nd.st.Ctime
		}
	})
	newest := slices.Max(ctimes)
	each(len(names), func(i int) {
		if ctimes[i] != 0 && newest-ctimes[i] > d.tombLife.Milliseconds() {
			_ = d.deleteNode(ctx, dir+"/"+names[i])
		}
	})
}

// verdict is why a held node that someone else deleted went: errForced when
// its tombstone was there, errNodeDeleted otherwise. The first to find the
// node gone settles it (deleting the tombstone, one round trip); others wait.
type verdict struct {
	done chan struct{}
	err  error
}

// verdictTimeout bounds the settling of a verdict.
const verdictTimeout = 2 * time.Second

// goneCause returns why h's node at path went, after something found it
// deleted (by someone else: a Release marks its node first). ctx bounds
// only the wait of a caller who did not start the settling.
func (d *Driver) goneCause(ctx context.Context, h *holding, path string) error {
	d.held.Lock()
	v, first := h.verdict, false
	if v == nil {
		v, first = &verdict{done: make(chan struct{}), err: errNodeDeleted}, true
		h.verdict = v
	}
	d.held.Unlock()
	if first {
		d.settle(v, path)
	}
	select {
	case <-v.done:
		return v.err
	case <-ctx.Done():
		return errNodeDeleted
	}
}

// settle decides v by deleting the tombstone of the node at path.
func (d *Driver) settle(v *verdict, path string) {
	ctx, cancel := context.WithTimeout(d.ctx, verdictTimeout)
	defer cancel()
	if d.deleteNode(ctx, d.tombstone(path)) == nil {
		v.err = errForced
	}
	close(v.done)
}
