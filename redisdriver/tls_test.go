package redisdriver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// tlsServer starts a private server that also listens with TLS and returns
// the TLS address and the CA that signed its certificate.
func tlsServer(t *testing.T) (string, *x509.CertPool) { return testserver.StartRedisTLS(t) }

// rediss:// verifies the server's certificate against the system roots: a
// certificate they do not vouch for fails Open, without falling back to plain
// text. skip_verify=true is the explicit opt-out, and a client given the CA
// through New verifies it.
func TestTLSVerifiesCertificatesUnlessToldNotTo(t *testing.T) {
	addr, ca := tlsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := lock.Open(ctx, "rediss://"+addr+"/0")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Open rediss:// with an untrusted certificate = %v, want x509.UnknownAuthorityError", err)
	}

	lk, err := lock.Open(ctx, "rediss://"+addr+"/0?skip_verify=true")
	if err != nil {
		t.Fatalf("Open with skip_verify=true: %v", err)
	}
	l, err := lk.TryAcquire(ctx, "tls")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	_ = lk.Close()

	client := redis.NewClient(&redis.Options{
		Addr: addr, TLSConfig: &tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}, ContextTimeoutEnabled: true,
	})
	defer client.Close()
	d, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	lk = lock.New(d)
	defer lk.Close()
	l, err = lk.Acquire(ctx, "tls")
	if err != nil {
		t.Fatalf("Acquire over TLS with the CA: %v", err)
	}
	_ = l.Release(ctx)
}
