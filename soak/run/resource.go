package run

import (
	"sync"
	"time"

	"github.com/distlock/lock/soak/check"
)

// Resource is the protected resource: one register per key, fenced as a store
// guarded by fencing tokens must be. A client reads the value with its token,
// then writes value+1 with it; either is accepted when its token is at least
// the largest seen so far on the key (by a read or a write), and raises it.
// The read and the write are separate steps, so only mutual exclusion (or the
// fence, for a holder that lost its lock between them) keeps two holders from
// losing each other's update, and the checker sees it.
//
// The resource records every operation itself at the moment it applies it, so
// an operation from a client killed before the answer reached it is still in
// the history.
type Resource struct {
	mu    sync.Mutex
	max   map[string]uint64
	value map[string]int64
	ops   []check.Op
}

func NewResource() *Resource {
	return &Resource{max: map[string]uint64{}, value: map[string]int64{}}
}

// Read applies a fenced read. call is when the client invoked it. A non-zero
// deadline (unfenced backends: the end of the holder's validity, on the clock
// every process of the soak shares) rejects a read that arrives after it.
func (r *Resource) Read(client, hold int, key string, token uint64, call, deadline int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	late := deadline != 0 && time.Now().UnixNano() > deadline
	ok := !late && token >= r.max[key]
	var v int64
	if ok {
		r.max[key] = token
		v = r.value[key]
	}
	r.ops = append(r.ops, check.Op{Kind: check.Read, Client: client, Hold: hold, Key: key, Token: token,
		Call: call, Return: time.Now().UnixNano(), Value: v, Accepted: ok, Late: late})
	return v, ok
}

// Write applies a fenced write of read+1, as Read.
func (r *Resource) Write(client, hold int, key string, token uint64, read, call, deadline int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	late := deadline != 0 && time.Now().UnixNano() > deadline
	ok := !late && token >= r.max[key]
	if ok {
		r.max[key] = token
		r.value[key] = read + 1
	}
	r.ops = append(r.ops, check.Op{Kind: check.Write, Client: client, Hold: hold, Key: key, Token: token,
		Call: call, Return: time.Now().UnixNano(), Value: read, Accepted: ok, Late: late})
	return ok
}

// Ops returns the reads and writes applied so far.
func (r *Resource) Ops() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.Op(nil), r.ops...)
}
