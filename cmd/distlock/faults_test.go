package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock/internal/faultproxy"
	"github.com/distlock/lock/internal/testserver"
)

// A loss scenario: distlock A holds the lock and runs a command; distlock B waits
// for the same key; A loses the lock to a real fault. A's command must get
// SIGTERM, and B's command must not start until A's command has exited.
//
// The commands log to one file with O_APPEND, so the file's order is the order
// of their writes, and each line carries the writer's clock in nanoseconds:
//
//	start A <ns>           A's command runs
//	term A <ns>            A's command got SIGTERM
//	end A <ns>             A's command exits (omitted if it ignores SIGTERM)
//	start B <ns> A-gone    B's command runs, and A's command had been reaped
//	end B <ns>
//
// B checks A's process with kill -0: distlock reaps its command before
// releasing, so a correct run finds it gone (a zombie would still answer).

// commandA logs its start, and on SIGTERM waits $DELAY (cleaning up, as a real
// command would) before logging its end and exiting 0. With $IGNORE_TERM it
// logs the SIGTERM and runs on, to be killed after --grace.
const commandA = `echo $$ > "$DIR/A.pid"
if [ -n "$IGNORE_TERM" ]; then
  trap 'echo "term A $(date +%s%N)" >> "$LOG"' TERM
else
  trap 'echo "term A $(date +%s%N)" >> "$LOG"; sleep $DELAY; echo "end A $(date +%s%N)" >> "$LOG"; exit 0' TERM
fi
echo "start A $(date +%s%N)" >> "$LOG"
echo ready
while :; do sleep 0.01; done`

const commandB = `if kill -0 "$(cat "$DIR/A.pid")" 2>/dev/null; then a=A-alive; else a=A-gone; fi
echo "start B $(date +%s%N) $a" >> "$LOG"
echo "end B $(date +%s%N)" >> "$LOG"`

// lossScenario is one backend's way to make A lose its lock.
type lossScenario struct {
	urlA, urlB string
	ttl, grace time.Duration
	lose       func(a *proc) // makes A lose the lock
	heal       func()        // after B's command ran, lets A reach the backend again (may be nil)
}

// freezeDistlock is the loss on a session-bound backend: distlock A is stopped
// (SIGSTOP, as a long GC pause, swap or a stopped terminal would) past its TTL.
// Its session stays open, so the server still holds the lock for it; when A
// resumes, its validity deadline has passed and it must stop its command, which
// was not frozen, before the lock may go.
func freezeDistlock(t *testing.T, ttl time.Duration) func(a *proc) {
	return func(a *proc) {
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The fault's length, not an ordering sleep: the last confirmed refresh
		// started before the freeze, so after ttl the deadline has passed.
		time.Sleep(ttl)
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// partitioned is the loss on an expiring backend: A reaches the servers through
// proxies that then drop all traffic, while the servers run on and free A's lock
// TTL after the last refresh they saw. urlA is built by forURL from the proxies'
// addresses.
func partitioned(t *testing.T, servers []string, forURL func(addrs []string) string) (urlA string, lose func(*proc), heal func()) {
	var proxies []*faultproxy.Proxy
	var addrs []string
	for _, s := range servers {
		p, err := faultproxy.Start(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	lose = func(*proc) {
		for _, p := range proxies {
			if err := p.Blackhole(); err != nil {
				t.Error(err)
			}
		}
	}
	heal = func() {
		for _, p := range proxies {
			if err := p.Heal(); err != nil {
				t.Error(err)
			}
		}
	}
	return forURL(addrs), lose, heal
}

// withHost is rawURL with its host:port replaced.
func withHost(t *testing.T, rawURL, host string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host
	return u.String()
}

func hostOf(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// Timings. Session-bound backends: a 1s TTL, so the freeze is short; --grace
// longer than the command's cleanup, which may take any time there. Expiring
// backends: with a 3s TTL and --grace 1.2s distlock sends SIGTERM 1.77s after
// the last confirmed refresh (TTL − drift − grace), and the command's 300ms
// cleanup ends about 900ms before the servers can free the lock: that much
// lateness of distlock's timer on a loaded machine is tolerated. (Without
// distlock's own trust window the SIGTERM came at TTL − drift and the next
// command started 15-20ms later, during the cleanup.)
const (
	sessionTTL    = time.Second
	sessionGrace  = 2 * time.Second
	expiringTTL   = 3 * time.Second
	expiringGrace = 1200 * time.Millisecond
	cleanupDelay  = "0.3"
)

func postgresLoss(t *testing.T) lossScenario {
	u := testserver.Postgres(t)
	return lossScenario{urlA: u, urlB: u, ttl: sessionTTL, grace: sessionGrace, lose: freezeDistlock(t, sessionTTL)}
}

func zookeeperLoss(t *testing.T) lossScenario {
	// The frozen distlock's session must outlive the freeze: the driver asks for
	// 10s by default and the server grants at least its minimum, far above 1s.
	u := testserver.ZooKeeper(t)
	return lossScenario{urlA: u, urlB: u, ttl: sessionTTL, grace: sessionGrace, lose: freezeDistlock(t, sessionTTL)}
}

func redisLoss(t *testing.T) lossScenario {
	u := testserver.Redis(t)
	urlA, lose, heal := partitioned(t, []string{hostOf(t, u)}, func(a []string) string { return withHost(t, u, a[0]) })
	return lossScenario{urlA: urlA, urlB: u, ttl: expiringTTL, grace: expiringGrace, lose: lose, heal: heal}
}

func redlockLoss(t *testing.T) lossScenario {
	var addrs []string
	for _, s := range testserver.RedisServers(t, 3) {
		addrs = append(addrs, s.Addr())
	}
	redlockURL := func(addrs []string) string {
		q := url.Values{}
		for _, a := range addrs {
			q.Add("server", "redis://"+a)
		}
		return "redlock://?" + q.Encode()
	}
	urlA, lose, heal := partitioned(t, addrs, redlockURL)
	return lossScenario{urlA: urlA, urlB: redlockURL(addrs), ttl: expiringTTL, grace: expiringGrace, lose: lose, heal: heal}
}

func etcdLoss(t *testing.T) lossScenario {
	u := testserver.Etcd(t)
	urlA, lose, heal := partitioned(t, []string{hostOf(t, u)}, func(a []string) string { return withHost(t, u, a[0]) })
	return lossScenario{urlA: urlA, urlB: u, ttl: expiringTTL, grace: expiringGrace, lose: lose, heal: heal}
}

func TestLostLockStopsTheCommandBeforeAnotherStarts(t *testing.T) {
	for _, b := range []struct {
		name     string
		scenario func(*testing.T) lossScenario
	}{
		{"redis", redisLoss},
		{"redlock", redlockLoss},
		{"postgres", postgresLoss},
		{"etcd", etcdLoss},
		{"zk", zookeeperLoss},
	} {
		t.Run(b.name, func(t *testing.T) {
			runLossScenario(t, b.scenario(t), false)
		})
	}
}

// On a session-bound backend the server keeps the lock until distlock releases
// it, so even a command that ignores SIGTERM is gone (killed after --grace)
// before anyone else can run.
func TestCommandIgnoringTermIsKilledBeforeAnotherStarts(t *testing.T) {
	for _, b := range []struct {
		name     string
		scenario func(*testing.T) lossScenario
	}{
		{"postgres", postgresLoss},
		{"zk", zookeeperLoss},
	} {
		t.Run(b.name, func(t *testing.T) {
			sc := b.scenario(t)
			sc.grace = 300 * time.Millisecond
			runLossScenario(t, sc, true)
		})
	}
}

func runLossScenario(t *testing.T, sc lossScenario, ignoreTerm bool) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	env := []string{"LOG=" + logPath, "DIR=" + dir, "DELAY=" + cleanupDelay}
	if ignoreTerm {
		env = append(env, "IGNORE_TERM=1")
	}
	key := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	ttl := sc.ttl.String()

	a := start(t, testEnv(env...), "run", "--url", sc.urlA, "--ttl", ttl, "--grace", sc.grace.String(), key, "--", "sh", "-c", commandA)
	a.expectLine(a.stdout, "ready")
	b := start(t, testEnv(env...), "run", "--url", sc.urlB, "--ttl", ttl, "--verbose", key, "--", "sh", "-c", commandB)
	b.expectLine(b.stderr, "waiting for the lock")

	sc.lose(a)
	expectStatus(t, b.wait(), 0, b.stderrText())
	if sc.heal != nil {
		sc.heal()
	}
	expectStatus(t, a.wait(), exitLost, a.stderrText())
	if !strings.Contains(a.stderrText(), "terminating sh") {
		t.Errorf("A's stderr does not report the loss:\n%s", a.stderrText())
	}
	if ignoreTerm && !strings.Contains(a.stderrText(), "killing it") {
		t.Errorf("A's stderr does not report the SIGKILL:\n%s", a.stderrText())
	}

	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := parseLog(t, data)
	want := []string{"start A", "term A", "end A", "start B", "end B"}
	if ignoreTerm {
		want = []string{"start A", "term A", "start B", "end B"}
	}
	var got []string
	for _, e := range log {
		got = append(got, e.event)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("commands ran in the order %q, want %q:\n%s\nA's stderr:\n%s", got, want, data, a.stderrText())
	}
	startB := log[len(log)-2]
	if startB.extra != "A-gone" {
		t.Fatalf("B's command started while A's still existed (%s):\n%s\nA's stderr:\n%s", startB.extra, data, a.stderrText())
	}
	if lastA := log[len(log)-3]; !startB.at.After(lastA.at) {
		t.Fatalf("B's command started at %v, before A's %s at %v:\n%s", startB.at, lastA.event, lastA.at, data)
	}
	t.Logf("A got SIGTERM, B started %v later", startB.at.Sub(log[1].at))
}

type logEntry struct {
	event string // "start A", "term A", …
	at    time.Time
	extra string
}

func parseLog(t *testing.T, data []byte) []logEntry {
	t.Helper()
	var log []logEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("bad log line %q in:\n%s", line, data)
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("bad log line %q in:\n%s", line, data)
		}
		e := logEntry{event: f[0] + " " + f[1], at: time.Unix(0, ns)}
		if len(f) > 3 {
			e.extra = f[3]
		}
		log = append(log, e)
	}
	return log
}
