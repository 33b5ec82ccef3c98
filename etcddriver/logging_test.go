package etcddriver_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/logtest"
	"github.com/distlock/lock/internal/testserver"
)

// The etcd client's own lines reach the Locker's logger through the zap
// adapter, with their fields: a request retried while the server is down is
// logged at Debug (once per operation: never higher).
func TestEtcdClientLinesReachTheLockersLogger(t *testing.T) {
	srv := testserver.StartEtcd(t)
	rec := logtest.New()
	lk := openLocker(t, srv.URL(), lock.WithLogger(rec.Logger()))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, _ = lk.TryAcquire(ctx, "k")
	got, ok := rec.Wait(10*time.Second, func(r logtest.Record) bool { return r.Attrs["client"] == "etcd" })
	if !ok {
		t.Fatalf("no line of the etcd client logged; the records:\n%s", rec.All())
	}
	t.Logf("first etcd line: %v", got)
	if got.Message == "" || len(got.Attrs) < 2 {
		t.Errorf("etcd client line logged as %v, want its message and fields", got)
	}
	for _, r := range rec.Matching(func(r logtest.Record) bool { return r.Attrs["client"] == "etcd" }) {
		if strings.HasPrefix(r.Message, "retrying") && r.Level != slog.LevelDebug {
			t.Errorf("a retried request logged above Debug: %v", r)
		}
	}
}
