package etcddriver

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// gRPC dials in the background and retries a refused connection like any
// other failure, without saying why, so Open used to wait its whole
// dial_timeout (5s) for endpoints where nothing listens and then report only
// "context deadline exceeded". A refusal is an answer, known in one round trip:
// watchRefusals dials every endpoint once beside the client, and when all of
// them refuse it ends Open at once. Any other outcome (an endpoint accepts, a
// dial times out because SYNs are dropped, the name does not resolve) changes
// nothing: Open waits as before, since the answer is still unknown.

// watchRefusals returns a context that ends, besides with ctx, once every
// endpoint has refused a connection, and a function that waits for the dials
// to end and returns the last refusal when every endpoint refused, nil
// otherwise. The dials are bounded by ctx and timeout; the function must be
// called, and it ends the dials still in flight.
func watchRefusals(ctx context.Context, endpoints []string, timeout time.Duration) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	dialCtx, stopDials := context.WithTimeout(ctx, timeout)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused int
		last    error
	)
	errRefused := errors.New("every endpoint refused the connection")
	for _, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d net.Dialer
			c, err := d.DialContext(dialCtx, "tcp", ep)
			if err == nil {
				_ = c.Close()
				return
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			refused++
			last = err
			if refused == len(endpoints) {
				cancel(errRefused)
			}
		}()
	}
	return ctx, func() error {
		stopDials()
		wg.Wait()
		all := context.Cause(ctx) == errRefused
		cancel(nil)
		if !all {
			return nil
		}
		return last
	}
}
