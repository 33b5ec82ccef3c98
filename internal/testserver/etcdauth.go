package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// EtcdRootUser is the user StartEtcdWithAuth creates, with etcd's role root.
const EtcdRootUser = "root"

// StartEtcdWithAuth starts a private single-member etcd server as StartEtcd does,
// then creates the user root with rootPassword and the role root, and enables
// authentication: from then on every key request needs a user's credentials.
// The server's URL carries none; tests add them (etcd://root:pw@host) and create
// further users and roles as root. Authentication stays on across Restart.
//
// It talks to etcd's JSON gateway (/v3/auth/...) over plain HTTP, so this package
// needs no etcd client.
func StartEtcdWithAuth(t testing.TB, rootPassword string, args ...string) *Server {
	t.Helper()
	s := StartEtcd(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	base := "http://" + s.Addr()
	for _, step := range []struct {
		path string
		body any
	}{
		{"/v3/auth/user/add", map[string]string{"name": EtcdRootUser, "password": rootPassword}},
		{"/v3/auth/user/grant", map[string]string{"user": EtcdRootUser, "role": "root"}},
		{"/v3/auth/enable", map[string]string{}},
	} {
		if err := etcdGateway(ctx, base+step.path, step.body); err != nil {
			t.Fatalf("testserver: enabling authentication on etcd %s: %v", s.Addr(), err)
		}
	}
	return s
}

// etcdGateway posts one request to etcd's JSON gateway. Errors carry etcd's
// answer, never the request (it may hold a password).
func etcdGateway(ctx context.Context, url string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := etcdClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", req.URL.Path, resp.Status, bytes.TrimSpace(answer))
	}
	return nil
}
