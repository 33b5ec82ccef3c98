package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testchild"
)

// holderEnv carries a holder process's instructions (a JSON holderSpec).
const holderEnv = "DISTLOCK_CONFORMANCE_HOLDER"

type holderSpec struct {
	URL string        `json:"url"`
	Key string        `json:"key"`
	TTL time.Duration `json:"ttl"`
	// Campaign: the holder leads the election Key (with this value) rather
	// than holding a plain lock; the output is the same.
	Campaign string `json:"campaign,omitempty"`
}

// HolderMain turns the test binary into a holder process when the suite started
// it as one, and returns at once otherwise. The fault properties about holder
// processes that are frozen (SIGSTOP) or killed run the test binary again for
// the holder: a real process with its own connections, opened from Harness.URL
// through lock.Open. Call it first in TestMain of every package that runs the
// suite with a Harness.URL:
//
//	func TestMain(m *testing.M) {
//		conformance.HolderMain()
//		leakcheck.VerifyTestMain(m)
//	}
//
// A holder opens the URL, acquires the key, writes "held TOKEN BEGAN" on its
// standard output (BEGAN: when it started to acquire, in Unix nanoseconds) and
// holds the lock, refreshed, until its standard input closes; then it releases
// and exits.
func HolderMain() {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		return
	}
	os.Exit(runHolder(spec))
}

func runHolder(raw string) int {
	var spec holderSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Printf("error bad %s: %v\n", holderEnv, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, err := lock.Open(ctx, spec.URL, lock.WithTTL(spec.TTL))
	if err != nil {
		fmt.Printf("error %s\n", oneLine(err))
		return 1
	}
	defer lk.Close()
	began := time.Now()
	var (
		tok     uint64
		release func(context.Context) error
	)
	if spec.Campaign != "" {
		ld, err := lk.Campaign(ctx, spec.Key, spec.Campaign)
		if err != nil {
			fmt.Printf("error %s\n", oneLine(err))
			return 1
		}
		if lk.Capabilities().Fencing {
			tok = ld.Token()
		}
		release = ld.Resign
	} else {
		l, err := lk.Acquire(ctx, spec.Key)
		if err != nil {
			fmt.Printf("error %s\n", oneLine(err))
			return 1
		}
		if lk.Capabilities().Fencing {
			tok = l.Token()
		}
		release = l.Release
	}
	fmt.Printf("held %d %d\n", tok, began.UnixNano())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the suite is done with us
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	_ = release(rctx)
	return 0
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// holderProc is a running holder process.
type holderProc struct {
	*testchild.Child
	token uint64
	began time.Time // when it started to acquire: its lock is valid at least TTL - drift from then
}

func (e *env) needHolderProcesses() {
	if e.h.URL == "" {
		e.Skip("Harness.URL is empty: the suite cannot open the backend in a holder process")
	}
}

// startHolder starts a holder process of key and returns once it holds the lock.
// The process is killed at the end of the property.
func (e *env) startHolder(key string, ttl time.Duration) *holderProc {
	e.Helper()
	return e.startHolderOf(holderSpec{URL: e.h.URL, Key: key, TTL: ttl})
}

// startLeader starts a holder process that leads the election name.
func (e *env) startLeader(name string, ttl time.Duration) *holderProc {
	e.Helper()
	return e.startHolderOf(holderSpec{URL: e.h.URL, Key: name, TTL: ttl, Campaign: "leader-process"})
}

func (e *env) startHolderOf(hs holderSpec) *holderProc {
	e.Helper()
	spec, _ := json.Marshal(hs)
	c, err := testchild.Start(e, holderEnv, string(spec)) // killed at the end of the property
	if err != nil {
		e.Fatalf("starting a holder process: %v", err)
	}
	p := &holderProc{Child: c}
	line, err := c.Next(30 * time.Second)
	c.Discard() // the rest, so the holder never blocks on a full pipe
	f := strings.Fields(line)
	switch {
	case errors.Is(err, testchild.ErrExited):
		e.Fatalf("the holder process exited without holding: does TestMain call conformance.HolderMain() first?")
	case err != nil:
		e.Fatalf("the holder process did not acquire %q within 30s", hs.Key)
	case len(f) == 3 && f[0] == "held":
		tok, err1 := strconv.ParseUint(f[1], 10, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			e.Fatalf("holder process: bad line %q", line)
		}
		p.token, p.began = tok, time.Unix(0, ns)
	default:
		e.Fatalf("holder process: %s", line)
	}
	return p
}

// A holder process frozen (SIGSTOP) while it holds a lock, as a process in a
// long pause: nobody else may get the lock before the holder's validity ran out
// (it would still believe it holds it); after that, on expiring backends,
// another client gets it. On session backends the server keeps the lock of a
// frozen but connected process, until its session times out where there is such
// a timeout (ZooKeeper).
func testFrozenHolderProcessIsSupersededAfterValidity(e *env) {
	e.needHolderProcesses()
	e.frozenHolderSuperseded(e.startHolder(e.key, e.ttl), false)
}

// A leader whose process is frozen (SIGSTOP) is replaced only after its
// validity has run out, with a larger term: an election is its name's lock.
func testFrozenLeaderProcessIsReplacedOnlyAfterItsValidity(e *env) {
	e.needHolderProcesses()
	e.frozenHolderSuperseded(e.startLeader(e.key, e.ttl), true)
}

// frozenHolderSuperseded freezes h and takes its key (campaign: wins its
// election) from another client, which must not happen before h's validity
// has run out, and must come with a larger token.
func (e *env) frozenHolderSuperseded(h *holderProc, campaign bool) {
	e.Helper()
	if err := h.Signal(syscall.SIGSTOP); err != nil {
		e.Fatalf("freezing the holder process: %v", err)
	}
	frozen := time.Now()
	validUntil := h.began.Add(e.ttl - driver.Drift(e.ttl)) // at least
	b := e.client()
	bound := e.ttl + e.h.SessionTimeout + lossSlack
	ctx, cancel := e.boundedCtx(bound)
	defer cancel()
	what, figure := "acquired", "frozen-holder-superseded-after"
	var (
		token func() uint64
		end   func()
		err   error
	)
	if campaign {
		what, figure = "led", "frozen-leader-replaced-after"
		var ld *lock.Leadership
		if ld, err = b.Campaign(ctx, e.key, "standby"); err == nil {
			token, end = ld.Token, func() { _ = ld.Resign(e.ctx) }
		}
	} else {
		var l *lock.Lock
		if l, err = b.Acquire(ctx, e.key); err == nil {
			token, end = l.Token, func() { e.release(l) }
		}
	}
	got := time.Now()
	switch {
	case err == nil:
		if got.Before(validUntil) {
			e.Errorf("another client %s %v before the frozen holder's validity ran out", what, validUntil.Sub(got))
		}
		if e.caps.Fencing && token() <= h.token {
			e.Errorf("token %d after the frozen holder's %d: fencing tokens must strictly increase", token(), h.token)
		}
		e.figure(figure, got.Sub(frozen))
		end()
	case ctx.Err() != nil && e.ctx.Err() == nil:
		if e.caps.Expiring {
			e.Errorf("no other client %s within %v of freezing the holder of an expiring lock (TTL %v)", what, bound, e.ttl)
		} else {
			e.Logf("the backend keeps the lock of a frozen, connected holder beyond %v (session-bound)", bound)
		}
	default:
		e.Fatalf("another client while the holder process is frozen: %v", err)
	}
}

// A holder process killed while it holds a lock stops blocking others: at once
// on session backends that see the connection drop (or after their session
// timeout), after the TTL on expiring ones.
func testKilledHolderProcessStopsBlockingOthers(e *env) {
	e.needHolderProcesses()
	h := e.startHolder(e.key, e.ttl)
	h.Kill()
	killed := time.Now()
	bound := e.h.SessionTimeout + lossSlack
	if e.caps.Expiring {
		bound += e.ttl
	}
	b := e.client()
	ctx, cancel := e.boundedCtx(bound)
	defer cancel()
	l, err := b.Acquire(ctx, e.key)
	if err != nil {
		e.Fatalf("Acquire after the holder process was killed: %v (bound %v)", err, bound)
	}
	e.figure("killed-holder-superseded-after", time.Since(killed))
	if e.caps.Fencing && e.token(l) <= h.token {
		e.Errorf("token %d after the killed holder's %d: fencing tokens must strictly increase", e.token(l), h.token)
	}
	e.release(l)
}
