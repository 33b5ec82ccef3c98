package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Watcher is implemented by clients whose locks say when they are lost
// (distlock's Lock.Lost): the scale scenario counts a lock whose Loss closed
// while it was held as lost.
type Watcher interface {
	AcquireWatched(ctx context.Context, key string) (Release, Loss, error)
}

// Loss tells that a held lock was lost: Done closes then, and Cause (nil when
// the library does not say) gives why.
type Loss struct {
	Done  <-chan struct{}
	Cause func() error
}

// Expirer is implemented by clients that can read from the server when a key
// held by anyone expires unless refreshed: the zero time when the key is not
// held. The scale scenario reads it from a second client, outside the holder,
// to see each refresh land.
type Expirer interface {
	Expires(ctx context.Context, key string) (time.Time, error)
}

// defaultScaleProbes is how many held keys the scale scenario samples for
// refresh lateness when Config.ScaleProbes is 0.
const defaultScaleProbes = 100

// scaleNA says why c does not run the scale scenario ("" when it does).
func scaleNA(c *Contestant) string {
	if why, ok := c.NA[Scale]; ok {
		return orDefault(why, "not measured")
	}
	if why, ok := c.NA[Held]; ok {
		return orDefault(why, "not measured")
	}
	if !c.Refreshes {
		return "no automatic refresh (each lock must be extended by its own call), so nothing to keep alive at scale"
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// runScale has one client hold Config.ScaleLocks locks with TTL
// Config.ScaleTTL for Config.ScaleWindow and reports what holding them costs
// and how well they are kept:
//
//   - memory (heap growth) and goroutines per lock in this process, and the
//     client's connections to the server, once every lock is held;
//   - the requests per second the server handles over the first half of the
//     window (no sampling then, so the count is the library's alone);
//   - over the second half, refresh lateness: a second client reads the
//     server's expiry of Config.ScaleProbes of the keys every TTL/6; each
//     refresh moves a key's expiry by the time since the previous refresh,
//     which is TTL/3 when it is on time (refreshLateness);
//   - losses: locks whose Lost channel closed while held (Watcher), and locks
//     whose release failed at the end (an owner-checked release fails when
//     the lock is no longer ours). Each is a failure of the run.
func runScale(ctx context.Context, r *Results, c *Contestant, rep int) error {
	cfg := r.Config
	base := runKey(Scale)
	before, err := measureBefore(c.Server.Ports)
	if err != nil {
		return err
	}
	clients, closeAll, err := openClients(ctx, c, 1, cfg.ScaleTTL)
	if err != nil {
		return err
	}
	defer closeAll()
	releases, lost, err := holdMany(ctx, clients[0], base, cfg.ScaleLocks, true)
	if err != nil {
		_ = releaseAll(context.WithoutCancel(ctx), releases)
		return err
	}
	if err := before.report(r, c, rep, cfg.ScaleLocks, ScaleBytes, ScaleGorout, ScaleConns); err != nil {
		_ = releaseAll(context.WithoutCancel(ctx), releases)
		return err
	}

	half := cfg.ScaleWindow / 2
	var werr error
	if c.Server.Requests != nil {
		var rate float64
		if rate, werr = serverRate(ctx, c.Server, half); werr == nil {
			r.set(c, ScaleReqs, rep, rate)
		}
	} else {
		sleepCtx(ctx, half)
	}
	if werr == nil {
		if c.NoLateness == "" {
			werr = r.sampleLateness(ctx, c, rep, base, cfg.ScaleWindow-half)
		} else {
			sleepCtx(ctx, cfg.ScaleWindow-half)
		}
	}

	lostN, cause, rerr := losses(lost, releaseEach(context.WithoutCancel(ctx), releases))
	r.set(c, ScaleLosses, rep, float64(lostN))
	if lostN > 0 {
		werr = errors.Join(werr, fmt.Errorf("%d of %d locks lost while held; the first: %w", lostN, len(releases), cause))
	}
	return errors.Join(werr, rerr, ctx.Err())
}

// losses counts the locks lost while held, from their Loss (where the client
// is a Watcher) and their release errors (relErrs, one per lock): a watched
// lock is lost when its Done closed before its release; an unwatched one
// when its release failed (an owner-checked release fails once the lock is
// not ours). It returns the count, the first loss's cause, and the release
// errors of watched locks not lost (a failure, not a loss).
func losses(lost []Loss, relErrs []error) (int, error, error) {
	n := 0
	var cause, failed error
	for k, err := range relErrs {
		gone := err != nil
		why := err
		if k < len(lost) && lost[k].Done != nil {
			gone = closed(lost[k].Done)
			why = errors.New("lost (no cause given)")
			if gone && lost[k].Cause != nil {
				why = lost[k].Cause()
			}
			if !gone && err != nil && failed == nil {
				failed = fmt.Errorf("release of a lock still held: %w", err)
			}
		}
		if gone {
			n++
			if cause == nil {
				cause = why
			}
		}
	}
	return n, cause, failed
}

// sampleLateness reads the expiries of the probed keys from a second client
// for d and sets the refresh-lateness figures.
func (r *Results) sampleLateness(ctx context.Context, c *Contestant, rep int, base string, d time.Duration) error {
	cfg := r.Config
	ttl := cfg.ScaleTTL
	probe, closeProbe, err := openClients(ctx, c, 1, ttl)
	if err != nil {
		return err
	}
	defer closeProbe()
	exp, ok := probe[0].(Expirer)
	if !ok {
		sleepCtx(ctx, d)
		return nil // no figure: the report shows "–"
	}
	n := cfg.ScaleProbes
	if n <= 0 {
		n = defaultScaleProbes
	}
	n = min(n, cfg.ScaleLocks)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = heldKey(base, i*cfg.ScaleLocks/n) // spread over the acquisition order
	}
	obs := make([][]expiryObs, n)
	end := time.Now().Add(d)
	tick := time.NewTicker(ttl / 6)
	defer tick.Stop()
	for time.Now().Before(end) {
		for i, key := range keys {
			e, err := exp.Expires(ctx, key)
			if err != nil {
				return fmt.Errorf("read expiry of %s: %w", key, err)
			}
			obs[i] = append(obs[i], expiryObs{at: time.Now(), expires: e})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	var late []time.Duration
	for _, o := range obs {
		late = append(late, refreshLateness(o, ttl)...)
	}
	r.set(c, ScaleRefreshes, rep, float64(len(late)))
	if len(late) > 0 {
		r.set(c, ScaleLateness, rep, 100*float64(Percentile(late, 99))/float64(ttl))
	}
	return nil
}

// expiryObs is one reading of a key's expiry on the server.
type expiryObs struct {
	at      time.Time // when the reading came back
	expires time.Time // the server's expiry; zero when the key was not held
}

// refreshLateness returns how late each refresh seen in a key's readings
// (taken in order) was. A refresh extends the key to its execution time plus
// the TTL, so between two refreshes the expiry moves by the time between
// them, TTL/3 when the second is on time: lateness is that move minus TTL/3
// (negative when early; the network's jitter between two requests is in it).
//
// A move of more than TTL/6 is a refresh (smaller moves are the rounding of
// the server's clock or a drift allowance recomputed per reading). It counts
// only when the readings around it are at most TTL/4 apart: refreshes are
// about TTL/3 apart, so no second refresh can hide between them and the move
// is one interval, not two.
//
// A key found free at or after its last expiry was not refreshed in time
// (nothing releases the keys during the readings): it counts as a refresh
// late by at least the time from its due time (the expiry less two thirds of
// the TTL) to that reading, so that lost locks weigh in the lateness too. A
// reading of a free key breaks the chain.
func refreshLateness(obs []expiryObs, ttl time.Duration) []time.Duration {
	var late []time.Duration
	for i := 1; i < len(obs); i++ {
		prev, cur := obs[i-1], obs[i]
		if !prev.expires.IsZero() && cur.expires.IsZero() && !cur.at.Before(prev.expires) {
			late = append(late, cur.at.Sub(prev.expires.Add(-ttl+ttl/3)))
			continue
		}
		if prev.expires.IsZero() || cur.expires.IsZero() {
			continue
		}
		moved := cur.expires.Sub(prev.expires)
		if moved <= ttl/6 || cur.at.Sub(prev.at) > ttl/4 {
			continue
		}
		late = append(late, moved-ttl/3)
	}
	return late
}

func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
