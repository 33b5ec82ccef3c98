package zkdriver_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/logtest"
	"github.com/distlock/lock/internal/testserver"
)

// go-zookeeper's lines about its connection reach the Locker's logger: the
// connection dropped when the server stops, the failed attempts to reach it
// (Info: the Locker itself warns once that the backend is unreachable), and
// the reconnection once it is back.
func TestGoZookeeperLinesReachTheLockersLogger(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	rec := logtest.New()
	mustOpen(t, srv.URL()+"?session_timeout=20s", lock.WithLogger(rec.Logger()))
	fromZK := func(prefix string) func(logtest.Record) bool {
		return func(r logtest.Record) bool {
			return r.Attrs["client"] == "go-zookeeper" && strings.HasPrefix(r.Message, prefix)
		}
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	failed, ok := rec.Wait(20*time.Second, fromZK("failed to connect"))
	if !ok {
		t.Fatalf("no failed connection logged; the records:\n%s", rec.All())
	}
	if failed.Level != slog.LevelInfo {
		t.Errorf("failed connection logged as %v, want Info", failed)
	}
	before := len(rec.Matching(fromZK("connected to"))) // the first connection may be logged too
	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	if got := rec.WaitN(20*time.Second, before+1, fromZK("connected to")); len(got) <= before {
		t.Fatalf("no reconnection logged; the records:\n%s", rec.All())
	}
}
