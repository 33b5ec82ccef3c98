// Command lockbench runs distlock's drivers side by side with the Go lock
// libraries users would otherwise pick, against private servers it starts
// itself, and writes a markdown report (RESULTS.md), the README's section on
// benchmarks (README-section.md), a chart (chart.png) and the figures
// (results.json, from which -render writes the others again):
//
//	cd bench && go run ./cmd/lockbench            # full run, about 30 minutes
//	cd bench && go run ./cmd/lockbench -quick     # every contestant briefly
//	cd bench && go run ./cmd/lockbench -scenarios read-heavy,semaphore -backends redis,etcd -out /tmp/x
//	cd bench && go run ./cmd/lockbench -scenarios failover -out /tmp/x  # leader killed → new leader
//	cd bench && go run ./cmd/lockbench -scenarios scale -scale-locks 10000 -scale-window 20s -out /tmp/x
//
// It needs redis-server, PostgreSQL, etcd and ZooKeeper installed (the
// project's scripts/install-backends). On a machine with two or more CPUs the
// servers run on CPU 0 and the benchmark on CPU 1. It exits with status 1 if
// any library let two holders into a critical section or lost a lock it held
// (the scale scenario), and 2 if a contestant failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/distlock/lock/bench/contestants"
	"github.com/distlock/lock/bench/harness"
	"github.com/distlock/lock/internal/testserver"
)

func main() {
	if spec := os.Getenv(leaderEnv); spec != "" {
		os.Exit(runLeader(spec))
	}
	os.Exit(run())
}

func run() int {
	quick := flag.Bool("quick", false, "run every contestant and scenario briefly (a smoke test, under 2 minutes)")
	out := flag.String("out", "results", "directory for RESULTS.md and chart.png")
	repeats := flag.Int("repeats", 0, "repeats of the timed scenarios (default 6, quick 1) and of failover (default 5, quick 1)")
	render := flag.String("render", "", "write the report and chart of a saved run (a results.json) into -out, without measuring")
	only := flag.String("scenarios", "", "comma-separated scenarios to run (default all): "+scenarioNames())
	backends := flag.String("backends", "", "comma-separated backends to run (default all): "+backendNames())
	scaleLocks := flag.Int("scale-locks", 0, "locks one client holds in the scale scenario (default 100000, quick 500)")
	scaleWindow := flag.Duration("scale-window", 0, "how long the scale scenario holds them (default 60s, quick 2s)")
	wide := flag.Int("wide-goroutines", -1, "goroutines of the second distinct-keys run (default 64; 0 skips it)")
	flag.Parse()
	if *render != "" {
		return rerender(*render, *out)
	}

	cfg := harness.Config{
		Window: 1500 * time.Millisecond, Slices: 6, Warmup: 300 * time.Millisecond, Repeats: 6,
		Goroutines: 16, WideGoroutines: 64, Contenders: 8,
		HeldLocks: 10000, HeldTTL: 3 * time.Second, HeldWindow: 3 * time.Second, HeldRuns: 1,
		ScaleLocks: 100000, ScaleTTL: 3 * time.Second, ScaleWindow: 60 * time.Second, ScaleProbes: 100,
		ShapeGoroutines: 16, ShapeClients: 4, ReadShare: 0.9, Permits: 4, ShapeHold: 500 * time.Microsecond,
		FailoverRepeats: 5,
		Log:             os.Stderr,
	}
	var err error
	if cfg.Only, err = parseScenarios(*only); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	mode := "full"
	if *quick {
		mode = "quick"
		cfg.Window, cfg.Slices, cfg.Warmup, cfg.Repeats = 300*time.Millisecond, 2, 100*time.Millisecond, 1
		cfg.HeldLocks, cfg.HeldWindow = 1000, 1*time.Second
		// TTL 2 s (etcd's minimum lease): the lateness half of the window
		// still sees a refresh or two of each probed key.
		cfg.ScaleLocks, cfg.ScaleTTL, cfg.ScaleWindow, cfg.ScaleProbes = 500, 2*time.Second, 2*time.Second, 20
		cfg.FailoverRepeats = 1
	}
	if *scaleLocks > 0 {
		cfg.ScaleLocks = *scaleLocks
	}
	if *scaleWindow > 0 {
		cfg.ScaleWindow = *scaleWindow
	}
	if *wide >= 0 {
		cfg.WideGoroutines = *wide
	}
	if *repeats > 0 {
		cfg.Repeats, cfg.FailoverRepeats = *repeats, *repeats
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	// Servers start with this process's affinity: CPU 0. Then the benchmark
	// moves to CPU 1, with as many Ps as it has CPUs.
	pinning := "servers and benchmark share the machine's CPUs (fewer than 2)"
	pinned := cpusAllowed() >= 2
	if pinned {
		if err := pinTo(0); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench: pin to CPU 0:", err)
			pinned = false
		}
	}
	servers, closeServers, err := startServers(cfg.ScaleLocks)
	defer closeServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	if pinned {
		if err := pinTo(1); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench: pin to CPU 1:", err)
			return 2
		}
		runtime.GOMAXPROCS(1)
		pinning = "servers pinned to CPU 0, benchmark to CPU 1 (GOMAXPROCS=1)"
	}

	cs, err := contestants.All(servers)
	if err == nil {
		cs, err = selectBackends(cs, *backends)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	cfg.SpawnLeader = spawnLeader(servers)
	loadBefore := loadAverage()
	res := harness.Run(ctx, cfg, cs)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "lockbench: interrupted")
		return 2
	}

	machine := describe(ctx, servers)
	machine.Pinning, machine.Mode = pinning, mode
	machine.Load = loadBefore + " at the start, " + loadAverage() + " at the end"
	machine.Command = "scripts/bench"
	if *quick {
		machine.Command += " -quick"
	}
	if *only != "" {
		machine.Command += " -scenarios " + *only
	}
	if *backends != "" {
		machine.Command += " -backends " + *backends
	}
	if *scaleLocks > 0 {
		machine.Command += fmt.Sprintf(" -scale-locks %d", *scaleLocks)
	}
	if *scaleWindow > 0 {
		machine.Command += " -scale-window " + scaleWindow.String()
	}
	if *wide >= 0 {
		machine.Command += fmt.Sprintf(" -wide-goroutines %d", *wide)
	}
	if err := write(*out, res, machine); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "lockbench: wrote %s, %s and %s in %v\n",
		filepath.Join(*out, "RESULTS.md"), filepath.Join(*out, "chart.png"), filepath.Join(*out, "results.json"), res.Took.Round(time.Second))
	return verdict(res)
}

// rerender writes the report and chart of a saved run.
func rerender(path, out string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	res, m, err := harness.Load(f)
	f.Close()
	if err == nil {
		err = write(out, res, m)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	return verdict(res)
}

// verdict prints the targets and returns the exit status: 1 for exclusion
// violations or locks lost while held, 2 for failures.
func verdict(res *harness.Results) int {
	for _, t := range contestants.Targets() {
		fmt.Fprintln(os.Stderr, " ", res.Check(t))
	}
	v, lost := res.Violations(), res.Losses()
	if v > 0 {
		fmt.Fprintf(os.Stderr, "lockbench: %d mutual-exclusion violations\n", v)
	}
	if lost > 0 {
		fmt.Fprintf(os.Stderr, "lockbench: %d locks lost while held\n", lost)
	}
	if v > 0 || lost > 0 {
		return 1
	}
	if len(res.Failures) > 0 {
		fmt.Fprintf(os.Stderr, "lockbench: %d failures:\n  %s\n", len(res.Failures), strings.Join(res.Failures, "\n  "))
		return 2
	}
	return 0
}

// write writes results.json, RESULTS.md, README-section.md and chart.png
// into dir.
func write(dir string, res *harness.Results, m harness.Machine) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	if err := res.Save(f, m); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	f, err = os.Create(filepath.Join(dir, "RESULTS.md"))
	if err != nil {
		return err
	}
	if err := res.WriteMarkdown(f, m, contestants.Targets()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	f, err = os.Create(filepath.Join(dir, "README-section.md"))
	if err != nil {
		return err
	}
	if err := res.WriteReadmeSection(f, m); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return res.WriteChart(filepath.Join(dir, "chart.png"))
}

// scenarioNames lists the scenarios -scenarios accepts.
func scenarioNames() string {
	var names []string
	for _, s := range harness.Scenarios {
		names = append(names, string(s))
	}
	return strings.Join(names, ",")
}

func parseScenarios(list string) ([]harness.Scenario, error) {
	if list == "" {
		return nil, nil
	}
	var out []harness.Scenario
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, s := range harness.Scenarios {
			if string(s) == strings.TrimSpace(name) {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-scenarios: no scenario %q (have %s)", name, scenarioNames())
		}
	}
	return out, nil
}

// backendFlags are the names -backends accepts, for the backends of
// contestants.All.
var backendFlags = map[string]string{
	"redis": contestants.Redis, "redlock": contestants.Redlock, "postgres": contestants.Postgres,
	"etcd": contestants.Etcd, "zk": contestants.ZooKeeper, "mem": contestants.Mem, "file": contestants.File,
}

func backendNames() string { return "redis,redlock,postgres,etcd,zk,mem,file" }

// selectBackends keeps the contestants of the backends named in list (all
// when it is empty).
func selectBackends(cs []*harness.Contestant, list string) ([]*harness.Contestant, error) {
	if list == "" {
		return cs, nil
	}
	keep := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		b, ok := backendFlags[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-backends: no backend %q (have %s)", name, backendNames())
		}
		keep[b] = true
	}
	var out []*harness.Contestant
	for _, c := range cs {
		if keep[c.Backend] {
			out = append(out, c)
		}
	}
	return out, nil
}

// startServers launches one Redis, three more for Redlock, PostgreSQL, etcd
// and ZooKeeper, and makes the file driver's directory. PostgreSQL's shared
// lock table gets room for scaleLocks advisory locks held at once.
func startServers(scaleLocks int) (contestants.Servers, func(), error) {
	var launched []*testserver.Server
	closeAll := func() {
		for _, s := range launched {
			s.Close()
		}
		launched = nil
		testserver.Shutdown()
	}
	launch := func(kind string, args ...string) (string, error) {
		s, err := testserver.Launch(kind, args...)
		if err != nil {
			return "", fmt.Errorf("start %s: %w (scripts/install-backends installs the servers)", kind, err)
		}
		launched = append(launched, s)
		return s.URL(), nil
	}
	var s contestants.Servers
	// The file driver's locks live in a directory of this run's own.
	dir, err := os.MkdirTemp("", "lockbench-file-")
	if err != nil {
		return s, closeAll, err
	}
	stopServers := closeAll
	closeAll = func() {
		stopServers()
		_ = os.RemoveAll(dir)
	}
	s.File = "file://" + dir
	if s.Redis, err = launch("redis"); err != nil {
		return s, closeAll, err
	}
	for range 3 {
		u, err := launch("redis")
		if err != nil {
			return s, closeAll, err
		}
		s.Redlock = append(s.Redlock, u)
	}
	if s.Postgres, err = launch("postgres", "-c", pgLockSlots(scaleLocks)); err != nil {
		return s, closeAll, err
	}
	if s.Etcd, err = launch("etcd"); err != nil {
		return s, closeAll, err
	}
	if s.ZooKeeper, err = launch("zookeeper"); err != nil {
		return s, closeAll, err
	}
	return s, closeAll, nil
}

// pgLockSlots sizes PostgreSQL's shared lock table (max_locks_per_transaction
// times max_connections, 200 on testserver's servers) for n advisory locks held
// at once by one session, with room to spare for the other scenarios; the
// default (64) holds about 12,800.
func pgLockSlots(n int) string {
	const connections = 200
	return fmt.Sprintf("max_locks_per_transaction=%d", max(64, (2*n+connections-1)/connections))
}
