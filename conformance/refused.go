package conformance

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock"
)

// refusedOpenBound is how long lock.Open may take against servers where
// nothing listens: every dial is refused at once, so the answer is known in
// a round trip to the kernel, far below any dial or open timeout.
const refusedOpenBound = time.Second

// refusedOpenTimeout is the open_timeout of the URL that points at nothing, so
// that a driver that waits for a refused server anyway fails the property in
// seconds rather than at the default open timeout.
const refusedOpenTimeout = 3 * time.Second

// lock.Open of a URL whose servers all refuse the connection (nothing listens
// on their ports) fails at once, within refusedOpenBound, with an error that
// matches ErrUnavailable, names the refusal (syscall.ECONNREFUSED, or
// "connection refused" in its text) and carries no password of the URL. A
// refusal is an answer: only silence (SYNs dropped, a frozen server) is worth
// waiting for, and OpenAndCloseHonourTheirTimeoutsAgainstFrozenServer checks
// that the driver does wait then.
func testOpenFailsFastWhenEveryServerRefuses(e *env) {
	e.needURL()
	if len(e.h.Servers) == 0 {
		e.Skip("Harness.Servers is empty: the suite cannot point the URL at ports where nothing listens")
	}
	u := e.h.URL
	for _, s := range e.h.Servers {
		dead := closedPort(e)
		u = strings.ReplaceAll(u, s, dead)
		u = strings.ReplaceAll(u, url.QueryEscape(s), url.QueryEscape(dead))
	}
	e.checkRefusedOpen(u, "every server refuses")
}

// checkRefusedOpen opens rawURL, which names servers that refuse, and checks
// that Open fails fast naming the refusal.
func (e *env) checkRefusedOpen(rawURL, what string) {
	e.Helper()
	rawURL = withQueryOf(e, rawURL, "open_timeout", refusedOpenTimeout.String())
	began := time.Now()
	lk, err := lock.Open(context.Background(), rawURL, lock.WithTTL(e.ttl))
	took := time.Since(began)
	if err == nil {
		_ = lk.Close()
		e.Fatalf("lock.Open where %s succeeded", what)
	}
	e.Logf("lock.Open where %s failed after %v: %v", what, took.Round(time.Millisecond), err)
	if took > refusedOpenBound {
		e.Errorf("lock.Open where %s took %v, want under %v: a refused connection is known at once", what, took.Round(time.Millisecond), refusedOpenBound)
	}
	if !errors.Is(err, lock.ErrUnavailable) {
		e.Errorf("lock.Open where %s = %v, want an error matching ErrUnavailable", what, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "connection refused") {
		e.Errorf("lock.Open where %s = %v, want it to name the refusal (syscall.ECONNREFUSED or \"connection refused\")", what, err)
	}
	for _, pw := range urlPasswords(rawURL) {
		if strings.Contains(err.Error(), pw) {
			e.Errorf("lock.Open where %s: the error shows a password of the URL", what)
		}
	}
}

// closedPort returns a loopback address where nothing listens: a port the
// kernel just gave out and that was closed again.
func closedPort(e *env) string {
	e.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Fatalf("finding a free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// withQueryOf returns rawURL with a query parameter set.
func withQueryOf(e *env, rawURL, name, value string) string {
	e.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		e.Fatalf("Harness.URL: %v", err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// urlPasswords returns the passwords rawURL carries: its own, and those of
// URLs in its query (Redlock's server parameters).
func urlPasswords(rawURL string) []string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	var pws []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		pws = append(pws, pw)
	}
	for _, vs := range u.Query() {
		for _, v := range vs {
			if strings.Contains(v, "://") {
				pws = append(pws, urlPasswords(v)...)
			}
		}
	}
	return pws
}
