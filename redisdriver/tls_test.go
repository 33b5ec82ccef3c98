package redisdriver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// tlsServer starts a private server that also listens with TLS, on a
// certificate for 127.0.0.1 signed by a throwaway CA, and returns the TLS
// address and the CA.
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
