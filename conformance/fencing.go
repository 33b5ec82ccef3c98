package conformance

import (
	"errors"
	"time"

	"github.com/distlock/lock"
)

func testTokensIncreaseAcrossHolders(e *env) {
	e.needFencing()
	clients := []*lock.Locker{e.client(), e.client(), e.client()}
	var last uint64
	for i := 0; i < 9; i++ {
		l := e.acquire(clients[i%len(clients)], e.key)
		tok := e.token(l)
		if tok <= last {
			e.Fatalf("holder %d got token %d after %d: tokens must strictly increase", i, tok, last)
		}
		last = tok
		e.release(l)
	}
}

func testTokensIncreaseAcrossExpiry(e *env) {
	e.needFencing()
	if !e.caps.Expiring {
		e.Skip("driver's locks never expire (Capabilities.Expiring is false); TokensIncreaseAcrossClientRestart covers a holder that vanished")
	}
	stale, current := e.staleHolder(true)
	if a, b := e.token(stale), e.token(current); b <= a {
		e.Fatalf("token after expiry %d, not greater than the expired holder's %d", b, a)
	}
	e.release(current)
}

func testTokensIncreaseAcrossClientRestart(e *env) {
	e.needFencing()
	a := e.client()
	l := e.acquire(a, e.key)
	first := e.token(l)
	if err := a.Close(); err != nil {
		e.Fatalf("Close: %v", err)
	}
	b := e.client()
	l2 := e.acquire(b, e.key)
	if tok := e.token(l2); tok <= first {
		e.Fatalf("token %d from a new client, not greater than %d from the closed one", tok, first)
	}
	e.release(l2)
}

func testTokensIncreaseAcrossBackendRestart(e *env) {
	e.needFencing()
	if e.h.RestartBackend == nil {
		e.Skip("Harness.RestartBackend is nil: this harness cannot restart its backend")
	}
	a := e.client()
	l := e.acquire(a, e.key)
	first := e.token(l)
	e.release(l)
	if err := e.h.RestartBackend(e.ctx); err != nil {
		e.Fatalf("Harness.RestartBackend: %v", err)
	}
	e.acceptGoroutines()
	b := e.client()
	var l2 *lock.Lock
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if l2, err = b.Acquire(e.ctx, e.key); err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.Fatalf("Acquire after backend restart: %v", err)
		}
	}
	if tok := e.token(l2); tok <= first {
		e.Fatalf("token %d after a backend restart, not greater than %d before it", tok, first)
	}
	e.release(l2)
}

func testTokenWithoutFencingIsAnError(e *env) {
	if e.caps.Fencing {
		e.Skip("driver declares fencing; the Tokens* properties check its tokens")
	}
	l := e.acquire(e.client(), e.key)
	defer e.release(l)
	defer func() {
		r := recover()
		err, _ := r.(error)
		if !errors.Is(err, lock.ErrUnsupported) {
			e.Fatalf("Token() on a driver without fencing: recovered %v, want a panic with an error matching ErrUnsupported", r)
		}
	}()
	tok := l.Token()
	e.Fatalf("Token() on a driver without fencing returned %d instead of refusing", tok)
}
