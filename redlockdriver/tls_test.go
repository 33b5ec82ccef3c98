package redlockdriver

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// tlsServer starts a private server that also listens with TLS and returns
// the TLS address and the CA that signed its certificate.
func tlsServer(t *testing.T) (string, *x509.CertPool) { return testserver.StartRedisTLS(t) }

// Each server carries its own TLS setting: a rediss:// server whose
// certificate the system roots do not vouch for fails Open (a refusal, not an
// outage), without falling back to plain text; with skip_verify=true on that
// server alone, TLS and plain servers lock together.
func TestEachServerHasItsOwnTLS(t *testing.T) {
	addr, _ := tlsServer(t)
	plain := testserver.RedisServers(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	u := "redlock://?server=" + plain[0].URL() + "&server=rediss://" + addr + "/0&server=" + plain[1].URL()
	_, err := lock.Open(ctx, u)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "server 2") {
		t.Fatalf("Open with an untrusted certificate on server 2 = %v, want x509.UnknownAuthorityError naming server 2", err)
	}

	u = "redlock://?server=" + plain[0].URL() + "&server=rediss://" + addr + "/0?skip_verify%3Dtrue&server=" + plain[1].URL()
	lk, err := lock.Open(ctx, u)
	if err != nil {
		t.Fatalf("Open with skip_verify=true on server 2: %v", err)
	}
	defer lk.Close()
	// Stop a plain server: the lock now needs the TLS one.
	if err := plain[1].Stop(); err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(ctx, "tls")
	if err != nil {
		t.Fatalf("Acquire with the TLS server in the majority: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
