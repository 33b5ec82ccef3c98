package run

import (
	"sync"
	"time"

	"github.com/distlock/lock/soak/check"
)

// Resource is the protected resource: one register per key, with fencing. A
// client reads the value, then writes value+1 with its token; the write is
// accepted when its token is at least the largest accepted so far. The read
// and the write are separate steps, so only mutual exclusion keeps two
// holders from losing each other's update, and the checker sees it.
//
// The resource records every write itself at the moment it applies it, so a
// write from a client killed before the answer reached it is still in the
// history.
type Resource struct {
	mu     sync.Mutex
	max    map[string]uint64
	value  map[string]int64
	writes []check.Op
}

func NewResource() *Resource {
	return &Resource{max: map[string]uint64{}, value: map[string]int64{}}
}

func (r *Resource) Read(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value[key]
}

// Write applies a fenced write. call is when the client began its
// read-modify-write (before its read).
func (r *Resource) Write(client, hold int, key string, token uint64, read int64, call int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := token >= r.max[key]
	if ok {
		r.max[key] = token
		r.value[key] = read + 1
	}
	r.writes = append(r.writes, check.Op{Kind: check.Write, Client: client, Hold: hold, Key: key, Token: token,
		Call: call, Return: time.Now().UnixNano(), Read: read, Accepted: ok})
	return ok
}

// Writes returns the writes applied so far.
func (r *Resource) Writes() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.Op(nil), r.writes...)
}
