package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/internal/redislayout"
	"github.com/distlock/lock/internal/redisproto"
)

// Fan-out: every request of a Redlock round goes to all N servers at once. Each
// server has one long-lived worker goroutine per Driver, fed by a queue; a
// round puts one job on each worker's queue and waits on one reply channel
// with one timer. So a round costs no goroutine, a paused server delays only
// its own worker, and a worker that finds several jobs queued sends them in one
// pipeline (one round trip for a burst of acquires or a batch of refreshes).

// op is what a job asks a server to do.
type op uint8

const (
	opAcquire op = iota
	opRelease
	opRefresh
	opPing
	opCheck // is the lock the owner's here? changes nothing
	opInfo  // INFO server, for the server's run_id
	opAcquireShared
	opInspect      // inspect.lua: changes nothing
	opForce        // force.lua
	opRelabel      // relabel.lua
	opRefreshBatch // refreshbatch.lua: many exclusive locks in one call
	opExtend       // many exclusive locks, a GETEX each, no script (refresh.go)
	opAcquireSet   // set.lua: several exclusive locks at once (sets.go)
)

func (o op) script() *redis.Script {
	switch o {
	case opAcquire:
		return acquireScript
	case opRelease:
		return releaseScript
	case opCheck:
		return checkScript
	case opAcquireShared:
		return sharedScript
	case opInspect:
		return inspectScript
	case opForce:
		return forceScript
	case opRelabel:
		return relabelScript
	case opRefreshBatch:
		return refreshBatchScript
	case opAcquireSet:
		return setScript
	default:
		return refreshScript
	}
}

// A job is one request to one server.
type job struct {
	op       op
	keys     []string
	args     []any
	deadline time.Time // the reply is worthless after it; not sent after it
	// timeout, when set, is the server's own limit, counted from when the
	// worker sends the job, after those before it in its pipeline: time
	// spent queued behind other rounds is not the server's.
	timeout time.Duration
	call    int          // which call of a batch it belongs to
	reply   chan<- reply // buffered for every job of the round: never blocks
}

type reply struct {
	server int
	call   int
	val    any
	err    error
}

// server is one of the N independent Redis servers.
type server struct {
	idx    int
	client redis.UniversalClient
	name   string // for errors: its address, never its password
	queue  queue
	dials  *redisproto.DialWatch
	// Under Driver.held: identify says that INFO reaches the one server
	// process behind the client, so that its run_id tells a restart (see
	// session.go), and seen is that run_id as last read.
	identify bool
	seen     seenID
}

const (
	// queueLen is how many jobs may wait for one server's worker; a round that
	// finds the queue full counts that server as not answering.
	queueLen = 4096
	// maxBatch caps how many queued jobs a worker sends in one pipeline.
	maxBatch = 256
	// maxPipelineKeys caps the keys of one pipeline (a job of a refresh
	// batch carries hundreds): a worker waits for its pipeline's answers
	// before it sends the next, so a pipeline of 65,536 locks (256 refresh
	// calls) kept every job queued behind it waiting the 200 ms to 1 s such
	// a pipeline took on a busy server, which a release or an acquire,
	// given the per-server timeout from its round's start, did not survive.
	maxPipelineKeys = 4096
)

var (
	errTimeout   = errors.New("no answer within the per-server timeout")
	errQueueFull = errors.New("too many requests queued for this server")
)

// A queue holds the jobs waiting for one server's worker. It is a slice that
// grows with what waits (up to queueLen) rather than a channel of queueLen
// jobs: a channel's buffer is allocated whole, over 400 KB per server, which a
// Driver holding a few locks would carry for nothing.
type queue struct {
	mu    sync.Mutex
	jobs  []job
	ready chan struct{} // holds a token while jobs is not empty
}

func newQueue() queue { return queue{ready: make(chan struct{}, 1)} }

// push adds j, or reports false when queueLen jobs already wait.
func (q *queue) push(j job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) >= queueLen {
		return false
	}
	q.jobs = append(q.jobs, j)
	if len(q.jobs) == 1 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take moves waiting jobs into batch (emptied first) and returns it:
// releases first (see releasesFirst), then the others in arrival order, up
// to maxBatch jobs and maxPipelineKeys keys (at least one job). The token
// stays while jobs are left.
//
// Releases go first because a release sheds load: it must not wait behind
// refresh calls queued before it, on servers without CPU to spare, until its
// per-server timeout (counted from its round's start) runs out, which keeps
// their locks held and refreshed, and the load with them (see "Releases go
// first" in docs/backends/redlock.md). Acquires keep their place behind the
// refreshes: on a full server, new locks waiting (and failing, for the
// portable layer to try again) is the back-pressure that keeps the held ones.
func (q *queue) take(batch []job) []job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if releaseBehind(q.jobs) {
		releasesFirst(q.jobs)
	}
	n, keys := 0, 0
	for n < len(q.jobs) && n < maxBatch {
		keys += len(q.jobs[n].keys)
		if keys > maxPipelineKeys && n > 0 {
			break
		}
		n++
	}
	batch = append(batch[:0], q.jobs[:n]...)
	rest := copy(q.jobs, q.jobs[n:])
	clear(q.jobs[rest:]) // let the jobs' slices go
	q.jobs = q.jobs[:rest]
	switch {
	case rest > 0:
		select {
		case q.ready <- struct{}{}:
		default:
		}
	case cap(q.jobs) > 4*maxBatch:
		q.jobs = nil // a burst is over: give its memory back
	}
	return batch
}

// releaseBehind reports whether a release waits behind another job: only then
// does take reorder (one pass, where reordering every take would cost more).
func releaseBehind(jobs []job) bool {
	other := false
	for _, j := range jobs {
		switch {
		case j.op != opRelease:
			other = true
		case other:
			return true
		}
	}
	return false
}

// releasesFirst moves the releases to the front of jobs, in arrival order,
// except a release queued after a job about its own lock (an acquire, say;
// refreshes aside), which keeps its place. A release that overtook its
// lock's acquire would find nothing to delete, and the acquire, run after
// it, would leave the lock on this server until its TTL: the next acquire
// of the key found it there (docs/backends/redlock.md, "Releases go first").
// A refresh run after the release finds the
// key gone and re-creates nothing, so a release may overtake any refresh.
func releasesFirst(jobs []job) {
	seen := map[string]bool{} // the locks of the jobs so far, refreshes aside
	first := make([]job, 0, len(jobs))
	rest := make([]job, 0, len(jobs))
	for _, j := range jobs {
		if j.op == opRelease && !seen[j.keys[0]] {
			first = append(first, j)
		} else {
			rest = append(rest, j)
		}
		if !j.op.refreshes() && len(j.keys) > 0 {
			seen[j.keys[0]] = true
		}
	}
	copy(jobs[copy(jobs, first):], rest)
}

// refreshes reports whether o only extends locks where they are.
func (o op) refreshes() bool {
	return o == opRefresh || o == opRefreshBatch || o == opExtend
}

// work runs s's jobs until Close, then runs those still queued and returns.
func (d *Driver) work(s *server) {
	defer d.workers.Done()
	batch := make([]job, 0, maxBatch)
	for {
		select {
		case <-s.queue.ready:
		case <-d.quit:
			for {
				if batch = s.queue.take(batch); len(batch) == 0 {
					return
				}
				d.run(s, batch)
				clear(batch)
			}
		}
		if batch = s.queue.take(batch); len(batch) > 0 {
			d.run(s, batch)
			clear(batch) // let the jobs' slices go
		}
	}
}

// run sends a batch of jobs to s, in one pipeline when there are several, and
// answers each. Jobs whose deadline passed while queued are not sent.
func (d *Driver) run(s *server, batch []job) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, j := range batch {
		if !now.Before(j.deadline) {
			j.reply <- reply{server: s.idx, call: j.call, err: errTimeout}
			continue
		}
		live = append(live, j)
		dl := j.deadline
		if t := now.Add(j.timeout * time.Duration(len(live))); j.timeout > 0 && t.Before(dl) {
			dl = t
		}
		if dl.After(deadline) {
			deadline = dl
		}
	}
	if len(live) == 0 {
		return
	}
	// The deadline, not a caller's context, bounds the request: a caller that
	// gave up still gets its release through.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if len(live) == 1 && live[0].op != opExtend {
		j := live[0]
		var v any
		var err error
		switch j.op {
		case opPing:
			v, err = s.client.Ping(ctx).Result()
		case opInfo:
			v, err = s.client.Info(ctx, "server").Result()
		default:
			v, err = j.op.script().Run(ctx, s.client, j.keys, j.args...).Result()
		}
		j.reply <- reply{server: s.idx, call: j.call, val: v, err: timeoutErr(err)}
		return
	}
	cmds := make([]redis.Cmder, len(live))
	var extends [][]*redis.StringCmd // by job, an opExtend's commands
	pipe := s.client.Pipeline()
	for i, j := range live {
		switch j.op {
		case opExtend:
			if extends == nil {
				extends = make([][]*redis.StringCmd, len(live))
			}
			extends[i] = queueExtend(ctx, pipe, j)
		case opPing:
			cmds[i] = pipe.Ping(ctx)
		case opInfo:
			cmds[i] = pipe.Info(ctx, "server")
		default:
			cmds[i] = j.op.script().EvalSha(ctx, pipe, j.keys, j.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var again []int
	for i, c := range cmds {
		if c != nil && isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = s.client.Pipeline()
		for _, i := range again {
			j := live[i]
			cmds[i] = j.op.script().Eval(ctx, pipe, j.keys, j.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, j := range live {
		if j.op == opExtend {
			v, err := extendAnswer(j, extends[i])
			j.reply <- reply{server: s.idx, call: j.call, val: v, err: timeoutErr(err)}
			continue
		}
		var v any
		err := cmds[i].Err()
		switch c := cmds[i].(type) {
		case *redis.Cmd:
			v = c.Val()
		case *redis.StatusCmd:
			v = c.Val()
		case *redis.StringCmd:
			v = c.Val()
		}
		j.reply <- reply{server: s.idx, call: j.call, val: v, err: timeoutErr(err)}
	}
}

// timeoutErr names a request that ran out of time the same way whichever layer
// noticed (the context, or the connection's deadline).
func timeoutErr(err error) error {
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || redislayout.IsNetTimeout(err)) {
		return errTimeout
	}
	return err
}

// A round is one fan-out: jobs for every server (for each of calls calls), and
// the replies as they come.
type round struct {
	replies chan reply
	timer   *time.Timer
	pending int // jobs not yet answered
}

// sendTo queues one job (keys, args) for each server that pick accepts, as
// send does.
func (d *Driver) sendTo(o op, deadline time.Time, pick func(server int) bool, keys []string, args []any) *round {
	r := &round{replies: make(chan reply, len(d.servers))}
	for _, s := range d.servers {
		if pick(s.idx) {
			r.pending++
			d.enqueue(s, job{op: o, keys: keys, args: args, deadline: deadline, reply: r.replies})
		}
	}
	r.timer = time.NewTimer(time.Until(deadline))
	return r
}

// enqueue gives a job to a server's worker, or answers errQueueFull at once.
func (d *Driver) enqueue(s *server, j job) {
	if !s.queue.push(j) {
		j.reply <- reply{server: s.idx, call: j.call, err: errQueueFull}
	}
}

// send queues one job per server for each call (keysArgs gives the call's keys
// and arguments) and returns the round to gather the replies from. A server
// whose queue is full answers errQueueFull at once.
func (d *Driver) send(o op, deadline time.Time, calls int, keysArgs func(call int) ([]string, []any)) *round {
	return d.sendOps(deadline, 0, calls, func(c int) (op, []string, []any) {
		k, a := keysArgs(c)
		return o, k, a
	})
}

// sendOps is send where each call names its own op, and a server's answer to
// each job is also bounded by timeout (if not 0) from when its worker sends
// it (see job.timeout).
func (d *Driver) sendOps(deadline time.Time, timeout time.Duration, calls int, call func(c int) (op, []string, []any)) *round {
	n := len(d.servers) * calls
	r := &round{replies: make(chan reply, n), pending: n}
	for c := 0; c < calls; c++ {
		o, k, a := call(c)
		for _, s := range d.servers {
			d.enqueue(s, job{op: o, keys: k, args: a, deadline: deadline, timeout: timeout, call: c, reply: r.replies})
		}
	}
	r.timer = time.NewTimer(time.Until(deadline))
	return r
}

// next returns the next reply, or false when the deadline passed or every job
// was answered. A late reply is dropped with the round.
func (r *round) next() (reply, bool) { return r.nextUntil(nil) }

// nextUntil is next, which also gives up (false) when done is closed.
func (r *round) nextUntil(done <-chan struct{}) (reply, bool) {
	if r.pending == 0 {
		r.timer.Stop()
		return reply{}, false
	}
	select {
	case rep := <-r.replies:
		r.pending--
		return rep, true
	case <-done:
		r.timer.Stop()
		r.pending = 0
		return reply{}, false
	case <-r.timer.C:
	}
	// The deadline passed; take an answer that had already arrived (select
	// picks at random among ready cases, and a process descheduled past the
	// deadline finds both ready), then stop.
	select {
	case rep := <-r.replies:
		r.pending--
		r.timer.Reset(0)
		return rep, true
	default:
		r.pending = 0
		return reply{}, false
	}
}

// stop ends the round early, when its outcome is decided.
func (r *round) stop() { r.timer.Stop() }

// serverError names the server an error came from. Server names are addresses,
// never URLs, so no password can show.
func (d *Driver) serverError(i int, err error) error {
	return fmt.Errorf("server %d (%s): %w", i+1, d.servers[i].name, err)
}
