package redlockdriver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// tlsServer starts a private server that also listens with TLS, on a
// certificate for 127.0.0.1 signed by a throwaway CA, and returns the TLS
// address and the CA. (A copy of redisdriver's test helper: test files
// cannot be shared between packages.)
func tlsServer(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "distlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.pem", "CERTIFICATE", caDER)
	certFile := write("cert.pem", "CERTIFICATE", der)
	keyFile := write("key.pem", "EC PRIVATE KEY", keyDER)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	testserver.StartRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), pool
}

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
