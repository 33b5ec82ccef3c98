package fence

import (
	"context"
	"sync"
)

// Memory is a Checker for a resource that lives in one process (a map, a file
// the process alone writes, a service that is itself the resource). It keeps
// the largest admitted token per resource name in memory, so it forgets them
// when the process exits: a resource that outlives the process needs its
// tokens stored beside it (SQL, or the driver modules' fenced writes).
//
// Admit alone only records the token; the write that follows is not atomic
// with it. Guard admits and runs the write under the resource's turn, which
// is what makes a stale holder harmless. The zero Memory is ready to use, as
// is NewMemory's. A Memory is safe for concurrent use.
type Memory struct {
	busy    busyResources
	mu      sync.Mutex
	highest map[string]uint64 // guarded by mu
}

// NewMemory returns an empty Memory: every resource admits any token above 0.
func NewMemory() *Memory {
	return &Memory{highest: make(map[string]uint64)}
}

// Admit admits token for resource if it is at least the largest admitted for
// it before, and remembers it; it waits for a Guard running on resource to
// finish first, so a token is never admitted while an older holder's guarded
// write is still in progress.
func (m *Memory) Admit(ctx context.Context, resource string, token uint64) error {
	return m.Guard(ctx, resource, token, nil)
}

// Guard admits token for resource as Admit does and, if it is admitted, runs
// write while holding the resource's turn: no other token is admitted for
// resource, and no other Guard's write on it runs, until write returns. An
// admitted token stays admitted whatever write returns; Guard returns write's
// error. If the token is refused, write does not run and Guard returns an
// error matching ErrStale. A nil write only admits.
func (m *Memory) Guard(ctx context.Context, resource string, token uint64, write func() error) error {
	if err := checkArgs(resource, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	release, err := m.busy.acquire(ctx, resource)
	if err != nil {
		return err
	}
	defer release()
	m.mu.Lock()
	if highest := m.highest[resource]; token < highest {
		m.mu.Unlock()
		return stale(resource, token, highest)
	}
	if m.highest == nil {
		m.highest = make(map[string]uint64)
	}
	m.highest[resource] = token
	m.mu.Unlock()
	if write == nil {
		return nil
	}
	return write()
}

// Highest reports the largest token admitted for resource, 0 if none was.
func (m *Memory) Highest(resource string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.highest[resource]
}
