package redisproto

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A DialWatch is a go-redis hook, for the clients of one driver, that counts
// the connections they dial, logs failed dials and routes go-redis's lines
// to the driver's LogSink, and, for clients the driver owns, ends the dials
// still in flight when the driver closes.
//
// go-redis dials a new connection in a goroutine of its own, with a context of
// its own: when the request that wanted the connection gives up (its
// deadline passed), and even when the client is closed, the dial goes on
// until go-redis's dial timeout (5s by default) against a server that does
// not answer. A driver's Close must leave no goroutine behind, so it calls
// Close here, which cancels those dials and waits until they have returned.
type DialWatch struct {
	dials atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	active sync.WaitGroup // dials in flight
	owned  bool           // Close cancels the dials (else it only counts)

	sink    *LogSink        // the driver's logger (nil: none)
	failing map[string]bool // under mu: the last dial to this address failed
}

// NewDialWatch returns a DialWatch; with owned, Close ends the dials in
// flight and refuses new ones (the clients are the driver's own, closed with
// it). A hook on a client the program gave to the driver only counts: the
// program keeps using the client after the driver closes. Failed dials, and
// go-redis's lines about the commands of the client, go to sink's logger.
func NewDialWatch(owned bool, sink *LogSink) *DialWatch {
	ctx, cancel := context.WithCancel(context.Background())
	return &DialWatch{ctx: ctx, cancel: cancel, owned: owned, sink: sink}
}

// Dials is the number of connections dialled so far.
func (w *DialWatch) Dials() uint64 { return w.dials.Load() }

// Close cancels the dials in flight and waits until they have returned (for
// owned clients).
func (w *DialWatch) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.active.Wait()
}

// DialHook implements redis.Hook.
func (w *DialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if w.owned {
			w.mu.Lock()
			if w.closed {
				w.mu.Unlock()
				return nil, net.ErrClosed
			}
			w.active.Add(1)
			w.mu.Unlock()
			defer w.active.Done()
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(w.ctx, cancel)()
		}
		conn, err := next(ctx, network, addr)
		if err == nil {
			w.dials.Add(1)
		}
		w.dialResult(ctx, addr, err)
		return conn, err
	}
}

// ProcessHook implements redis.Hook: with a logger in the sink, the command's
// context carries the sink, so that what go-redis prints about it reaches
// the driver's logger (see RouteGoRedis). Without one it costs a load.
func (w *DialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if w.sink.Logger() != nil {
			ctx = WithLogSink(ctx, w.sink)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook, as ProcessHook does.
func (w *DialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if w.sink.Logger() != nil {
			ctx = WithLogSink(ctx, w.sink)
		}
		return next(ctx, cmds)
	}
}
