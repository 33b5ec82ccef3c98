// Package harness runs lock libraries side by side against the same servers: the
// contestants are adapters behind Client, the scenarios measure them in short
// interleaved turns, and the report turns repeats into medians, spreads and
// ratios to the peers measured in the same run.
package harness

import (
	"context"
	"errors"
	"time"
)

// ErrBusy is what Client.TryAcquire returns when another owner holds the key.
var ErrBusy = errors.New("harness: lock held elsewhere")

// ErrNoTry is what Client.TryAcquire returns for a library without a single
// non-blocking attempt.
var ErrNoTry = errors.New("harness: library has no try-acquire")

// Release gives a held lock back.
type Release func(ctx context.Context) error

// Client is one independent client of a lock library, what one process would
// open: its own connections or sessions. Its methods are called from many
// goroutines at once.
type Client interface {
	// Acquire waits until the key is held, ctx is done, or the library gives up.
	Acquire(ctx context.Context, key string) (Release, error)
	// TryAcquire makes one attempt: ErrBusy when held elsewhere.
	TryAcquire(ctx context.Context, key string) (Release, error)
	Close() error
}

// Role says what a contestant stands for in the comparison.
type Role int

const (
	Ours  Role = iota // a distlock driver through the portable API
	Floor             // the raw protocol, written in the benchmark: the cost of the wire
	Peer              // another library users would otherwise pick
)

func (r Role) String() string {
	return [...]string{"ours", "floor", "peer"}[r]
}

// Scenario names one measurement.
type Scenario string

const (
	Uncontended Scenario = "uncontended"
	Distinct    Scenario = "distinct"
	Contended   Scenario = "contended"
	Held        Scenario = "held"
	Scale       Scenario = "scale"
)

// Scenarios in the order they run and are reported.
var Scenarios = []Scenario{Uncontended, Distinct, Contended, ReadHeavy, Semaphore, Held, Scale, Failover}

// MutexScenarios are the scenarios of the exclusive lock.
var MutexScenarios = []Scenario{Uncontended, Distinct, Contended, Held, Scale}

// Contestant is one library at one setting, against one backend.
type Contestant struct {
	Backend string // the group it is compared within: "Redis", "PostgreSQL", ...
	Name    string // "distlock", "raw floor", "bsm/redislock", ...
	Setting string // "default", "tuned: 1 ms retry", ...
	Role    Role
	// Open makes an independent client whose locks last ttl (0: the library's
	// default) and, where the library can, are refreshed automatically.
	Open func(ctx context.Context, ttl time.Duration) (Client, error)
	// NA gives, per scenario, why this contestant does not run it.
	NA map[Scenario]string
	// TryUncontended makes the uncontended scenario use TryAcquire (one attempt,
	// as the raw floors are) instead of Acquire.
	TryUncontended bool
	// Refreshes says that held locks stay held without the caller's help
	// (automatic refresh or a session heartbeat).
	Refreshes bool
	// NoLateness says why the scale scenario has no refresh-lateness figure
	// for this contestant (session locks, a lease whose expiry the server
	// reports too coarsely); "" where its Client reads expiries (Expirer).
	NoLateness string
	// Server is the backend this contestant talks to, for the held-locks
	// figures.
	Server *Server
	// Elector is the library's leader election, for the failover scenario;
	// nil for a contestant without one (it does not take part).
	Elector *Elector
}

// ID is the contestant's unique label: "Redis/bsm/redislock (default)".
func (c *Contestant) ID() string { return c.Backend + "/" + c.Label() }

// Label is the contestant's name within its backend: "bsm/redislock (default)".
func (c *Contestant) Label() string {
	if c.Setting == "" {
		return c.Name
	}
	return c.Name + " (" + c.Setting + ")"
}

// Server describes a backend as the held-locks scenario observes it.
type Server struct {
	// Ports are the client ports of the server(s); connections are counted as
	// this process's established TCP sockets to them.
	Ports []int
	// Requests returns a counter of requests the server has handled, or nil
	// when the backend has none.
	Requests func(ctx context.Context) (int64, error)
}
