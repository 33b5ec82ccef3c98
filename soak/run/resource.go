package run

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/soak/check"
)

// Resource is the protected resource: one register per key, fenced by the
// code users run, package fence's Memory. A client reads the value with its
// token, then writes value+1 with it; each runs under fence.Memory.Guard for
// the key, so either is applied only when its token is at least the largest
// the fence has admitted for the key (by a read or a write), and raises it.
// The read and the write are separate steps, so only mutual exclusion (or the
// fence, for a holder that lost its lock between them) keeps two holders from
// losing each other's update, and the checker sees it: a Memory that admitted
// a stale token, or let another token in while a guarded write ran, shows as
// a history with no linearization.
//
// Unfenced backends (Redlock) have no tokens, and Memory admits no token 0:
// their operations carry the end of the holder's validity instead, and the
// resource rejects one that arrives after it (checked and applied under the
// resource's mutex, atomically). A run is fenced or unfenced throughout.
//
// The resource records every operation itself at the moment it applies it, so
// an operation from a client killed before the answer reached it is still in
// the history.
type Resource struct {
	guard guard // fence.Memory's Guard; the self-test's broken fences otherwise
	mu    sync.Mutex
	value map[string]int64 // guarded by mu
	ops   []check.Op       // guarded by mu
}

// guard runs write if token is admitted for resource, as fence.Memory.Guard.
type guard func(ctx context.Context, resource string, token uint64, write func() error) error

func NewResource() *Resource { return newResourceGuardedBy(fence.NewMemory().Guard) }

func newResourceGuardedBy(g guard) *Resource {
	return &Resource{guard: g, value: map[string]int64{}}
}

// Read applies a fenced read. call is when the client invoked it. A non-zero
// deadline (unfenced backends, token 0: the end of the holder's validity, on
// the clock every process of the soak shares) rejects a read that arrives
// after it.
func (r *Resource) Read(client, hold int, key string, token uint64, call, deadline int64) (int64, bool) {
	o := check.Op{Kind: check.Read, Client: client, Hold: hold, Key: key, Token: token, Call: call}
	r.apply(&o, deadline, func() { o.Value = r.value[key] })
	return o.Value, o.Accepted
}

// Write applies a fenced write of read+1, as Read.
func (r *Resource) Write(client, hold int, key string, token uint64, read, call, deadline int64) bool {
	o := check.Op{Kind: check.Write, Client: client, Hold: hold, Key: key, Token: token, Call: call, Value: read}
	r.apply(&o, deadline, func() { r.value[key] = read + 1 })
	return o.Accepted
}

// apply runs do (with r.mu held) if o is admitted, and records o with its
// outcome: through the fence for a token, by its deadline for token 0 with a
// deadline. Recording an applied o inside the guard puts its Return after the
// moment it took effect.
func (r *Resource) apply(o *check.Op, deadline int64, do func()) {
	if o.Token == 0 && deadline != 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		o.Late = time.Now().UnixNano() > deadline
		if !o.Late {
			do()
			o.Accepted = true
		}
		o.Return = time.Now().UnixNano()
		r.ops = append(r.ops, *o)
		return
	}
	// The resource applies what reached it, whoever hung up since: its
	// context does not end (Guard then fails only for a refused token).
	err := r.guard(context.Background(), o.Key, o.Token, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		do()
		o.Accepted = true
		o.Return = time.Now().UnixNano()
		r.ops = append(r.ops, *o)
		return nil
	})
	if err != nil {
		// Refused: stale, or token 0 without a deadline (a fenced run whose
		// driver gave no token), which the checker's model admits on a fresh
		// key and so reports.
		r.mu.Lock()
		defer r.mu.Unlock()
		o.Return = time.Now().UnixNano()
		r.ops = append(r.ops, *o)
	}
}

// Ops returns the reads and writes applied so far.
func (r *Resource) Ops() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]check.Op(nil), r.ops...)
}
