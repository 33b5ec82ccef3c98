package etcddriver_test

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
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key, as PEM, for a server on 127.0.0.1 or for a
// client.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"etcd.test"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// tlsFront accepts TLS connections that present a client certificate of ca and
// forwards them to a (real) etcd's plain-text client port, as a TLS-terminating
// sidecar would. The installed etcd's test helper serves plain HTTP only.
func tlsFront(t *testing.T, ca *testCA, upstream string) string {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "etcd", x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2"}, // gRPC requires ALPN
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				track(up)
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// etcds:// verifies the server against cacert and presents cert and key; it fails
// closed when the server cannot be verified or the client has no certificate.
func TestTLSVerifiesTheServerAndPresentsTheClientCertificate(t *testing.T) {
	url := testserverEtcd(t)
	ca, otherCA := newCA(t, "test CA"), newCA(t, "other CA")
	front := tlsFront(t, ca, strings.TrimPrefix(url, "etcd://"))
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	otherCAFile := writeFile(t, dir, "other-ca.pem", otherCA.pem)
	certPEM, keyPEM := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	certFile, keyFile := writeFile(t, dir, "client.pem", certPEM), writeFile(t, dir, "client-key.pem", keyPEM)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	base := "etcds://" + front + "/distlock-tls?dial_timeout=1s&"
	lk, err := lock.Open(ctx, base+"cacert="+caFile+"&cert="+certFile+"&key="+keyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k", lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// server_name checks the certificate for another name than the address's.
	named, err := lock.Open(ctx, base+"cacert="+caFile+"&cert="+certFile+"&key="+keyFile+"&server_name=etcd.test")
	if err != nil {
		t.Fatalf("server_name naming the certificate: %v", err)
	}
	named.Close()

	for name, query := range map[string]string{
		"no client certificate":       "cacert=" + caFile,
		"server signed by another CA": "cacert=" + otherCAFile + "&cert=" + certFile + "&key=" + keyFile,
		"system roots do not know it": "cert=" + certFile + "&key=" + keyFile,
		"wrong name for the server":   "cacert=" + caFile + "&cert=" + certFile + "&key=" + keyFile + "&server_name=elsewhere",
	} {
		lk, err := lock.Open(ctx, base+query)
		if err == nil {
			lk.Close()
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := lock.Open(ctx, base+"cacert="+filepath.Join(dir, "missing.pem")); !errors.Is(err, lock.ErrInvalidURL) {
		t.Errorf("Open with a missing CA file = %v, want ErrInvalidURL", err)
	}
}
