package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Failover measures leader election: a leader in another process is killed
// (SIGKILL: no resign, no goodbye to the server) and a standby campaigning
// in this process takes over once the backend notices, after the lease TTL
// or session timeout, or at once where the server sees the connection close.
const Failover Scenario = "failover"

// The failover figures.
var (
	FailoverTime  = Metric{"failover_ms", Failover, "failover", "ms", true}
	FailoverTTL   = Metric{"failover_ttl_s", Failover, "TTL / session timeout", "s", true}
	FailoverTerms = Metric{"failover_terms", Failover, "terms checked", "", false}
)

// Elector is a contestant's leader election, for the failover scenario.
type Elector struct {
	// TTL is the lease TTL or session timeout the election runs with: how
	// long a dead leader may keep the lead at most.
	TTL time.Duration
	// Open makes an independent campaigner, what one process would open.
	Open func(ctx context.Context) (Campaigner, error)
}

// Campaigner campaigns in one election at a time.
type Campaigner interface {
	// Campaign returns once this campaigner leads name, with its term (a
	// number larger for every new leader; 0 for a library without one) and
	// a function that gives the lead up.
	Campaign(ctx context.Context, name string) (term uint64, resign func(context.Context) error, err error)
	Close() error
}

// LeaderProc is a leader running in a process of its own.
type LeaderProc interface {
	Term() uint64 // the term it leads with (0: the library has none)
	Kill() error  // SIGKILL, then reap the process
}

// SpawnLeader starts a process that campaigns for name with c's Elector and
// returns once that process leads.
type SpawnLeader func(ctx context.Context, c *Contestant, name string) (LeaderProc, error)

// standbyStart is how long the standby campaigns at least before the kill:
// long enough that it is waiting as a real standby would be, not still
// starting. It orders nothing: a standby that had not begun would still be
// measured from the kill to its lead.
const standbyStart = 200 * time.Millisecond

// killDelay is how long after the leader leads it is killed: standbyStart
// plus a random part of the TTL, so that the kill falls anywhere in the
// leader's refresh cycle (a lease refreshed just before the kill lasts a
// whole TTL after it, one refreshed long before much less), as a crash does.
func killDelay(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return standbyStart
	}
	return standbyStart + rand.N(ttl)
}

// failoverTimeout is how long the standby may take to lead after the kill
// before the repeat is a failure.
func failoverTimeout(cfg Config, ttl time.Duration) time.Duration {
	if cfg.FailoverTimeout > 0 {
		return cfg.FailoverTimeout
	}
	return 3*ttl + 10*time.Second
}

type standbyResult struct {
	term   uint64
	resign func(context.Context) error
	err    error
	at     time.Time
}

// runFailover is one repeat: spawn the leader, start the standby, kill the
// leader, time the standby's lead from the kill.
func runFailover(ctx context.Context, r *Results, c *Contestant, rep int) error {
	e := c.Elector
	if r.Config.SpawnLeader == nil {
		return errors.New("no way to start a leader process (Config.SpawnLeader is nil)")
	}
	name := runKey(Failover)
	standby, err := e.Open(ctx)
	if err != nil {
		return fmt.Errorf("open the standby: %w", err)
	}
	defer standby.Close()

	leader, err := r.Config.SpawnLeader(ctx, c, name)
	if err != nil {
		return fmt.Errorf("leader process: %w", err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = leader.Kill()
		}
	}()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan standbyResult, 1)
	go func() {
		term, resign, err := standby.Campaign(sctx, name)
		done <- standbyResult{term, resign, err, time.Now()}
	}()
	// resignStandby gives up a lead the standby won, whenever it won it.
	resignStandby := func(res standbyResult) {
		if res.err == nil && res.resign != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = res.resign(rctx)
			rcancel()
		}
	}

	select {
	case res := <-done:
		resignStandby(res)
		if res.err != nil {
			return fmt.Errorf("standby, before the kill: %w", res.err)
		}
		return fmt.Errorf("the standby led while the leader process (term %d) was alive: two leaders", leader.Term())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(killDelay(e.TTL)):
	}

	limit := failoverTimeout(r.Config, e.TTL)
	killedAt := time.Now()
	killErr := leader.Kill()
	killed = true
	if killErr != nil {
		return fmt.Errorf("kill the leader process: %w", killErr)
	}
	var res standbyResult
	select {
	case res = <-done:
	case <-time.After(limit - time.Since(killedAt)):
		cancel()
		resignStandby(<-done)
		return fmt.Errorf("the standby did not lead within %v of the leader's kill (TTL %v)", limit, e.TTL)
	case <-ctx.Done():
		cancel()
		resignStandby(<-done)
		return ctx.Err()
	}
	defer resignStandby(res)
	if res.err != nil {
		return fmt.Errorf("standby: %w", res.err)
	}
	lt := leader.Term()
	if (lt != 0 || res.term != 0) && res.term <= lt {
		return fmt.Errorf("the standby's term %d is not larger than the killed leader's %d", res.term, lt)
	}
	r.set(c, FailoverTime, rep, float64(res.at.Sub(killedAt))/float64(time.Millisecond))
	r.set(c, FailoverTTL, rep, e.TTL.Seconds())
	terms := 0.0
	if lt != 0 {
		terms = 1
	}
	r.set(c, FailoverTerms, rep, terms)
	return nil
}

// inFailover says that c took part in the failover scenario: it has an
// Elector, or figures from one (a run loaded from results.json has no
// Electors).
func inFailover(r *Results, c *Contestant) bool {
	if c.Elector != nil {
		return true
	}
	_, ok := r.Values[c.ID()][FailoverTTL.Key]
	return ok
}

// failover writes the failover section: one table over every backend, each
// contestant's time from the leader's kill to the standby's lead, beside the
// reference, the first peer in it (etcd's concurrency.Election), repeat by
// repeat.
func (p *printer) failover(r *Results) {
	if !r.Config.runs(Failover) {
		return
	}
	var ref *Contestant
	var cs []*Contestant
	for _, c := range r.Contestants {
		if inFailover(r, c) {
			cs = append(cs, c)
			if ref == nil && c.Role == Peer {
				ref = c
			}
		}
	}
	if len(cs) == 0 {
		return
	}
	p.f("## Failover: leader killed → new leader\n\n")
	p.f("A leader process (lockbench re-executed as a child) campaigns and says when it leads; a standby in the benchmark process opens its own client, campaigns and waits; %v plus a random part of the TTL later (so that the kill falls anywhere in the leader's refresh cycle, as a crash does) the leader process is killed with SIGKILL (no resign, no close: the server learns of it only by the lease or session running out, or by the TCP connection closing where the server ties the lock to it). ", standbyStart)
	p.f("Failover is the time from the kill to the standby's Campaign returning, leading; median over %d repeats with the range in brackets. ", r.Config.FailoverRepeats)
	p.f("The TTL is the lease TTL or session timeout each election ran with, which bounds how long a dead leader keeps the lead; a lease refreshed some time before the kill runs out sooner than a TTL after it. ")
	p.f("Where the lead ends with the leader's connection or process (PostgreSQL's session-level advisory locks, the file driver's flock) the server or kernel frees it as soon as the process dies, and the TTL does not apply. ")
	p.f("Terms checked: the killed leader had a term (a fencing token, or the revision of etcd's leader key) and the standby's was larger, as it must be. ")
	p.f("A repeat fails if the standby's term is not larger, if the standby leads while the leader process lives, or if it does not lead within 3 TTLs + 10 s of the kill.\n\n")
	p.f("| backend | contestant | %s | %s | repeats | %s |", heading(FailoverTTL), heading(FailoverTime), FailoverTerms.Title)
	if ref != nil {
		p.f(" ÷ %s |", ref.Backend+" "+ref.Name)
	}
	p.f("\n|---|---|---:|---:|---:|---|")
	if ref != nil {
		p.f("---:|")
	}
	p.f("\n")
	for _, c := range cs {
		ft := Summarise(r.Get(c, FailoverTime))
		terms := "–"
		if s := Summarise(r.Get(c, FailoverTerms)); s.N > 0 {
			terms = "no term"
			if s.Min == 1 {
				terms = "yes"
			}
		}
		p.f("| %s | %s | %s | %s | %d of %d | %s |", c.Backend, bold(c), spread(Summarise(r.Get(c, FailoverTTL))), spread(ft), ft.N, r.Config.FailoverRepeats, terms)
		if ref != nil {
			cell := ""
			if c != ref && ft.N > 0 {
				cell = ratioCell(Summarise(Ratios(r.Get(c, FailoverTime), r.Get(ref, FailoverTime))))
			}
			p.f(" %s |", cell)
		}
		p.f("\n")
	}
	p.f("\n")
}
