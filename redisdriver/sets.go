package redisdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

var _ driver.SetAcquirer = (*Driver)(nil)

// TryAcquireSet implements driver.SetAcquirer: one call of set.lua checks
// every key as Acquire's first try does (a key held, or with a waiter the
// request may not pass, is driver.ErrLocked) and takes them all, or none, in
// one round trip, each lock as TryAcquire would have taken it. A script
// reaches one server, and in a Cluster one hash slot: keys of several slots
// are driver.ErrUnsupported, and package lock takes them one at a time.
func (d *Driver) TryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	if err := driver.CheckSet("redisdriver", reqs); err != nil {
		return nil, err
	}
	ctx, done := d.attempt(ctx)
	gs, err := d.tryAcquireSet(ctx, reqs)
	return gs, done(err)
}

func (d *Driver) tryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	plain := !d.fencing
	ks := make([]keys, len(reqs))
	names := make([]string, 0, hotKeys*len(reqs))
	args := make([]any, 1, 1+4*len(reqs))
	for i, req := range reqs {
		ks[i] = d.keys(req.Key)
		if d.cluster != nil && redisproto.Slot(ks[i].Lock) != redisproto.Slot(ks[0].Lock) {
			return nil, fmt.Errorf("%w: redisdriver: the set's keys are in several Cluster hash slots, which one script cannot reach", driver.ErrUnsupported)
		}
		names = append(names, scriptKeys(ks[i])...)
		args = append(args, req.Owner, millis(req.TTL), shape(req), req.Label)
		plain = plain && plainOwner(req.Owner)
	}
	args[0] = ""
	if plain {
		args[0] = "1"
	}
	start := time.Now()
	v, err := setScript.Run(ctx, d.client, names, args...).Slice()
	if err != nil {
		return nil, classify(err)
	}
	if len(v) != len(reqs)+1 || v[0] != int64(1) {
		return nil, setRefused(v, ks)
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		// Every lock is on the one server that answered: its run_id is
		// read (if at all) once.
		if err := d.recordGrant(ctx, ks[i], req, plain && shape(req) < 0); err != nil {
			return nil, err
		}
		tok, _ := v[i+1].(int64)
		grants[i] = driver.Grant{Token: d.token(uint64(tok)), Start: start}
	}
	return grants, nil
}

// setRefused is the error of set.lua's answer {0, i, reply}: nothing was
// taken, because of lock i, of which reply is what acquire.lua answers.
func setRefused(v []any, ks []keys) error {
	if len(v) == 3 {
		if i, ok := v[1].(int64); ok && i >= 1 && int(i) <= len(ks) {
			r, err := decodeAcquire(v[2], ks[i-1])
			if err == nil && r.status == acqBusy {
				err = driver.ErrLocked
			}
			if err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("redisdriver: set script answered %v", v)
}
