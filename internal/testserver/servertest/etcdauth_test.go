package servertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock/internal/testserver"
)

// An etcd started with authentication refuses key requests without credentials,
// serves root with the password given, and stays so across a restart.
func TestEtcdWithAuthRefusesAnonymousRequestsAndServesRoot(t *testing.T) {
	const pw = "root-pw"
	s := testserver.StartEtcdWithAuth(t, pw)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(when string) {
		anon := etcdClient(t, s.URL())
		if _, err := anon.Get(ctx, "k"); !errors.Is(err, rpctypes.ErrUserEmpty) {
			t.Errorf("%s: Get without credentials = %v, want %v", when, err, rpctypes.ErrUserEmpty)
		}
		root, err := clientv3.New(clientv3.Config{
			Endpoints: []string{strings.TrimPrefix(s.URL(), "etcd://")}, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Username: testserver.EtcdRootUser, Password: pw,
		})
		if err != nil {
			t.Fatalf("%s: connecting as root: %v", when, err)
		}
		defer root.Close()
		if _, err := root.Put(ctx, "k", when); err != nil {
			t.Errorf("%s: Put as root: %v", when, err)
		}
	}
	check("started")
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	check("restarted")
}
