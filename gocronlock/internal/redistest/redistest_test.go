package redistest_test

import (
	"net/url"
	"path"
	"testing"
	"time"

	"github.com/distlock/lock/gocronlock/internal/crontest"
	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/redisdriver"
)

func TestMain(m *testing.M) {
	crontest.Child()
	leakcheck.VerifyTestMain(testserver.Main(m))
}

// redisURL is the shared test Redis, with keys under a prefix of the test's
// own.
func redisURL(t *testing.T) string {
	u, err := url.Parse(testserver.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("prefix", "gocronlock-"+path.Base(t.TempDir()))
	u.RawQuery = q.Encode()
	return u.String()
}

func TestLockerRunsEachTickOnceAcrossTwoProcessesOnRedis(t *testing.T) {
	crontest.LockerRunsEachTickOnce(t, redisURL(t), 0)
}

func TestLockerWithMinHoldRunsEachTickOnceWhenInstancesTickApartOnRedis(t *testing.T) {
	crontest.LockerRunsEachTickOnce(t, redisURL(t), 100*time.Millisecond)
}

func TestElectorFailsOverWithinTheTTLWhenTheLeaderIsKilledOnRedis(t *testing.T) {
	crontest.ElectorFailsOver(t, redisURL(t), 2*time.Second, false)
}
