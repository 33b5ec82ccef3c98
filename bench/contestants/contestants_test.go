package contestants

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/lock/bench/harness"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var servers = Servers{
	Redis:     "redis://127.0.0.1:7001/0",
	Redlock:   []string{"redis://127.0.0.1:7002/0", "redis://127.0.0.1:7003/0", "redis://127.0.0.1:7004/0"},
	Postgres:  "postgres://postgres@127.0.0.1:7005/postgres?sslmode=disable",
	Etcd:      "etcd://127.0.0.1:7006",
	ZooKeeper: "zk://127.0.0.1:7007",
	File:      "file:///tmp/lockbench-test",
}

// Every contestant listed as without shapes exists (a renamed one would
// silently run, and fail, the shape scenarios), and every contestant either
// has a reason for each shape scenario it skips or can be asked for it.
func TestShapelessContestantsExistAndSayWhy(t *testing.T) {
	cs, err := All(servers)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]*harness.Contestant{}
	for _, c := range cs {
		ids[c.ID()] = c
	}
	for id := range noShapes {
		if ids[id] == nil {
			t.Errorf("noShapes names %q, which is not a contestant", id)
		}
	}
	for _, c := range cs {
		for _, s := range []harness.Scenario{harness.ReadHeavy, harness.Semaphore} {
			if why, na := c.NA[s]; na && why == "" {
				t.Errorf("%s: %s n/a without a reason", c.ID(), s)
			}
		}
		if c.Role == harness.Ours {
			if _, na := c.NA[harness.ReadHeavy]; na {
				t.Errorf("%s: ours is n/a in read-heavy by list; its driver's capabilities decide", c.ID())
			}
		}
	}
	// Each network backend's shapes have something to compare ours with,
	// except where no Go library or raw recipe exists (ZooKeeper; etcd's
	// semaphore).
	for _, want := range []struct {
		backend string
		s       harness.Scenario
	}{{Redis, harness.ReadHeavy}, {Redis, harness.Semaphore}, {Postgres, harness.ReadHeavy}, {Postgres, harness.Semaphore}, {Etcd, harness.ReadHeavy}} {
		n := 0
		for _, c := range cs {
			if _, na := c.NA[want.s]; c.Backend == want.backend && c.Role != harness.Ours && !na {
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s, %s: nothing to compare ours with", want.backend, want.s)
		}
	}
}

// Every target names contestants that exist, except our Redlock driver,
// which joins when it is merged.
func TestTargetsNameContestantsThatExist(t *testing.T) {
	cs, err := All(servers)
	if err != nil {
		t.Fatal(err)
	}
	r := &harness.Results{Contestants: cs}
	for _, target := range Targets() {
		v := r.Check(target)
		if v.Missing != "" && v.Missing != "no figure (see failures)" && target.Backend != Redlock {
			t.Errorf("%s: %s", target.Text, v.Missing)
		}
	}
}

func TestEveryBackendHasOursAndAPeerOrFloor(t *testing.T) {
	cs, err := All(servers)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]map[harness.Role]int{}
	ids := map[string]bool{}
	for _, c := range cs {
		if ids[c.ID()] {
			t.Errorf("two contestants are called %s", c.ID())
		}
		ids[c.ID()] = true
		if roles[c.Backend] == nil {
			roles[c.Backend] = map[harness.Role]int{}
		}
		roles[c.Backend][c.Role]++
		if c.Server == nil || (len(c.Server.Ports) == 0 && c.Backend != Mem && c.Backend != File) {
			t.Errorf("%s: no server ports to count connections on", c.ID())
		}
	}
	for _, b := range []string{Redis, Postgres, Etcd, ZooKeeper} {
		ours := 1
		if b == Redis {
			ours = 2 // the default and fencing=false
		}
		if roles[b][harness.Ours] != ours || roles[b][harness.Peer]+roles[b][harness.Floor] == 0 {
			t.Errorf("%s: roles %v, want ours and something to compare with", b, roles[b])
		}
	}
	if len(roles[Redlock]) == 0 {
		t.Errorf("no Redlock contestants")
	}
}

func TestServerPortsAreTheURLsPorts(t *testing.T) {
	srv, err := redisServer(servers.Redlock...)
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.Ports) != 3 || srv.Ports[0] != 7002 || srv.Ports[2] != 7004 {
		t.Errorf("ports = %v, want [7002 7003 7004]", srv.Ports)
	}
}

func TestRedlockURLNamesEveryServer(t *testing.T) {
	got := redlockURL(servers.Redlock)
	want := "redlock://?server=redis://127.0.0.1:7002/0&server=redis://127.0.0.1:7003/0&server=redis://127.0.0.1:7004/0"
	if got != want {
		t.Errorf("redlockURL = %s, want %s", got, want)
	}
}

func TestEveryNetworkedOrFileBackendHasAnElectionForFailover(t *testing.T) {
	cs, err := All(servers)
	if err != nil {
		t.Fatal(err)
	}
	ttl := map[string]time.Duration{}
	peer := false
	for _, c := range cs {
		if c.Elector == nil {
			continue
		}
		if c.Role == harness.Ours {
			ttl[c.Backend] = c.Elector.TTL
		} else {
			peer = peer || (c.Backend == Etcd && c.Name == electionLabel)
		}
	}
	want := map[string]time.Duration{Redis: 2 * time.Second, Redlock: 2 * time.Second, Postgres: 2 * time.Second,
		Etcd: 2 * time.Second, ZooKeeper: 4 * time.Second, File: 2 * time.Second}
	for b, w := range want {
		if ttl[b] != w {
			t.Errorf("%s: ours elects with TTL %v, want %v", b, ttl[b], w)
		}
	}
	if _, ok := ttl[Mem]; ok {
		t.Errorf("mem elects in the failover scenario; it has no process to kill")
	}
	if !peer {
		t.Errorf("no etcd concurrency.Election to compare failover with")
	}
}
