package fence

import (
	"context"
	"sync"
)

// busyResources serialises work per resource name: Acquire waits (honouring its
// context) until no one else holds the name. An entry lives only while someone
// holds or waits for its name, so the map does not grow with the names seen.
type busyResources struct {
	mu      sync.Mutex
	entries map[string]*busyEntry
}

type busyEntry struct {
	turn chan struct{} // holds one value while the name is held
	refs int           // holders and waiters; guarded by busyResources.mu
}

// acquire holds resource until the returned release is called, or returns the
// context's error, holding nothing.
func (b *busyResources) acquire(ctx context.Context, resource string) (release func(), err error) {
	b.mu.Lock()
	if b.entries == nil {
		b.entries = make(map[string]*busyEntry)
	}
	e := b.entries[resource]
	if e == nil {
		e = &busyEntry{turn: make(chan struct{}, 1)}
		b.entries[resource] = e
	}
	e.refs++
	b.mu.Unlock()

	select {
	case e.turn <- struct{}{}:
		return func() {
			<-e.turn
			b.drop(resource, e)
		}, nil
	case <-ctx.Done():
		b.drop(resource, e)
		return nil, ctx.Err()
	}
}

func (b *busyResources) drop(resource string, e *busyEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(b.entries, resource)
	}
}
