// Package leakcheck finds goroutines that a test left running.
//
// It does for this project's tests what go.uber.org/goleak does (the same
// four calls), from the runtime's own stack dump, so that the published
// modules require no module for their tests alone: an importer's
// `go list -m all` lists every requirement of every module it imports,
// test-only or not.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Option tunes Find and VerifyNone.
type Option func(*options)

type options struct {
	ignore map[uint64]bool
	wait   time.Duration
}

// IgnoreCurrent takes every goroutine running now as given.
func IgnoreCurrent() Option {
	ids := map[uint64]bool{}
	for _, g := range goroutines() {
		ids[g.id] = true
	}
	return func(o *options) {
		for id := range ids {
			o.ignore[id] = true
		}
	}
}

// Wait sets how long Find waits for goroutines on their way out before it
// calls them leaked (default 1s).
func Wait(d time.Duration) Option { return func(o *options) { o.wait = d } }

// Find returns an error listing the goroutines still running, other than the
// caller, the runtime's and the test framework's and those the options take
// as given, once they have had the wait to end.
func Find(opts ...Option) error {
	o := options{ignore: map[uint64]bool{}, wait: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	deadline := time.Now().Add(o.wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		var leaked []goroutine
		for _, g := range goroutines() {
			if !o.ignore[g.id] && !g.standard() {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "leakcheck: %d goroutine(s) left running:", len(leaked))
			for _, g := range leaked {
				b.WriteString("\n\n")
				b.WriteString(g.stack)
			}
			return fmt.Errorf("%s", b.String())
		}
		time.Sleep(pause)
	}
}

// VerifyNone fails t when Find finds a goroutine.
func VerifyNone(t testing.TB, opts ...Option) {
	t.Helper()
	if err := Find(opts...); err != nil {
		t.Error(err)
	}
}

// TestingM is what VerifyTestMain runs: a *testing.M, or a wrapper of one.
type TestingM interface{ Run() int }

// VerifyTestMain runs the tests and then, if they passed, fails the run
// when a goroutine is left running; it calls os.Exit.
func VerifyTestMain(m TestingM, opts ...Option) {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

type goroutine struct {
	id    uint64
	state string // "chan receive", without the wait time
	first string // the function on top of the stack
	stack string // the whole record, for the report
}

// goroutines parses runtime.Stack's dump of every goroutine but the caller's
// (the first record).
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for i, rec := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the calling goroutine
		}
		if g, ok := parse(string(rec)); ok {
			gs = append(gs, g)
		}
	}
	return gs
}

// parse reads one record: "goroutine 7 [chan receive, 2 minutes]:\n
// pkg.fn(args)\n\tfile:line\n...".
func parse(rec string) (goroutine, bool) {
	head, rest, _ := strings.Cut(rec, "\n")
	f := strings.Fields(head)
	if len(f) < 3 || f[0] != "goroutine" {
		return goroutine{}, false
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	state := head[strings.IndexByte(head, '[')+1:]
	state, _, _ = strings.Cut(strings.TrimSuffix(state, "]:"), ",")
	first, _, _ := strings.Cut(rest, "\n")
	if i := strings.LastIndexByte(first, '('); i > 0 {
		first = first[:i]
	}
	return goroutine{id: id, state: state, first: first, stack: rec}, true
}

// standard reports goroutines that belong to the runtime or to the testing
// package, not to the code under test.
func (g goroutine) standard() bool {
	switch g.first {
	case "runtime.goexit", "os/signal.signal_recv", "os/signal.loop", "runtime.ensureSigM",
		"runtime.ReadTrace", "runtime.runfinq", "runtime.bgsweep", "runtime.bgscavenge",
		"runtime.forcegchelper", "runtime.runCleanups":
		return true
	}
	// The framework's goroutines wait in package testing: the main one in
	// RunTests, a test's in Run for its subtests, a parallel test in Parallel.
	return strings.HasPrefix(g.first, "testing.")
}
