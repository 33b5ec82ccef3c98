package lock

import (
	"context"
	"sync"
	"sync/atomic"
)

// Calls in flight. Close must interrupt every Acquire, TryAcquire, Do and
// Observe in flight and wait for them (and for the cleanups of the ones it
// interrupted) before it releases what is held and closes the driver. Every
// call registers for that, so the registration is on the hot path of every
// acquire: it takes no lock that all calls share and starts no goroutine.
//
//   - The count of calls in flight is one atomic word (callGate), which also
//     carries the closed bit, so that entering and seeing Close are one step.
//   - A call whose context can never end (Background, or values only) runs on
//     the Locker's own calls context, which Close cancels: nothing to register.
//   - A call whose context can end gets a context of its own, derived from the
//     caller's (so cancelling it is the caller's context's affair, not the
//     Locker's), and its cancel function is linked into one of callShards
//     lists, each with its own mutex, chosen by the call's sequence number, so
//     that calls on many goroutines rarely meet on one.

// closedBit marks a closed gate in callGate.n; the bits below count calls.
const closedBit = 1 << 62

// callGate counts calls in flight and is closed by Close.
type callGate struct {
	n       atomic.Int64
	once    sync.Once
	drained chan struct{} // closed when the gate is closed and no call is in flight
}

func newCallGate() *callGate { return &callGate{drained: make(chan struct{})} }

// enter counts a call in, or reports false once the gate is closed.
func (g *callGate) enter() bool {
	if g.n.Add(1)&closedBit != 0 {
		g.done()
		return false
	}
	return true
}

// add counts in more work on behalf of a call already in (its cleanup): it
// succeeds after the gate closed too, since the call holds the gate open.
func (g *callGate) add() { g.n.Add(1) }

// done counts a call (or add's work) out.
func (g *callGate) done() {
	if g.n.Add(-1) == closedBit {
		g.once.Do(func() { close(g.drained) })
	}
}

// close closes the gate: enter fails from now on. It returns a channel that is
// closed when every call in flight is done.
func (g *callGate) close() <-chan struct{} {
	if g.n.Add(closedBit) == closedBit {
		g.once.Do(func() { close(g.drained) })
	}
	return g.drained
}

func (g *callGate) closed() bool { return g.n.Load()&closedBit != 0 }

// callShards is the number of lists of interruptible calls.
const callShards = 32

// callShard is one list of calls whose context can end, padded to a cache
// line so that shards used from different CPUs do not share one.
type callShard struct {
	mu     sync.Mutex
	closed bool
	head   *call
	_      [64 - 8 - 8 - 8]byte
}

// call is an interruptible call's registration.
type call struct {
	cancel     context.CancelFunc
	shard      *callShard
	prev, next *call
}

// track registers a call so Close can interrupt it: the returned context is
// done when ctx is or when Close begins. seq spreads calls over the shards.
// untrack(c) must be called when the call returns; c is nil for a call that
// needed no registration of its own.
func (lk *Locker) track(ctx context.Context, seq uint64) (context.Context, *call, error) {
	if !lk.gate.enter() {
		return nil, nil, ErrClosed
	}
	if ctx.Done() == nil {
		// The caller's context can never end (Background, or values only): the
		// Locker's own calls context serves, and the call costs no context of
		// its own, nor the drivers that watch it a registration of their own.
		if ctx == context.Background() {
			return lk.calls, nil, nil
		}
		return closingCtx{Context: lk.calls, values: ctx}, nil, nil
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &call{cancel: cancel, shard: &lk.callShards[seq%callShards]}
	s := c.shard
	s.mu.Lock()
	if s.closed {
		// Close has already interrupted this shard's calls: this one too.
		s.mu.Unlock()
		cancel()
		return cctx, c, nil
	}
	c.next = s.head
	if s.head != nil {
		s.head.prev = c
	}
	s.head = c
	s.mu.Unlock()
	return cctx, c, nil
}

// untrack ends a call that track registered.
func (lk *Locker) untrack(c *call) {
	if c != nil {
		s := c.shard
		s.mu.Lock()
		if !s.closed {
			if c.prev != nil {
				c.prev.next = c.next
			} else {
				s.head = c.next
			}
			if c.next != nil {
				c.next.prev = c.prev
			}
		}
		s.mu.Unlock()
		c.cancel()
	}
	lk.gate.done()
}

// interruptCalls makes every call in flight, and every call that registers
// later, see its context done. Close calls it once, after closing the gate.
func (lk *Locker) interruptCalls() {
	lk.endCalls()
	for i := range lk.callShards {
		s := &lk.callShards[i]
		s.mu.Lock()
		s.closed = true
		for c := s.head; c != nil; c = c.next {
			c.cancel()
		}
		s.head = nil
		s.mu.Unlock()
	}
}

// closingCtx is the context of a call whose caller's context cannot end: it is
// done when the Locker closes, and carries the caller's values.
type closingCtx struct {
	context.Context                 // the Locker's calls context
	values          context.Context // the caller's
}

func (c closingCtx) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	// The calls context's own keys, among them the one by which package context
	// finds the cancelable parent it registers children with.
	return c.Context.Value(key)
}

func (lk *Locker) isClosed() bool { return lk.gate.closed() }
