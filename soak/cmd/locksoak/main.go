// Command locksoak runs the randomized fault soak of issue 18 against one
// backend and checks its history (see package run). It exits 1 on any
// violation, 2 on a failure to run.
//
// Clients are separate processes (this program with -client), each reaching
// the backend through fault proxies of its own, except on mem, whose clients
// are goroutines of this process sharing its in-memory store. The nemesis
// freezes, kills and cuts off clients and freezes and restarts the servers;
// see backends.go for each backend's faults.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/distlock/lock/etcddriver"
	_ "github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/memdriver"
	_ "github.com/distlock/lock/pgadvisory"
	_ "github.com/distlock/lock/redisdriver"
	_ "github.com/distlock/lock/redlockdriver"
	"github.com/distlock/lock/soak/run"
	_ "github.com/distlock/lock/zkdriver"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-client" {
		if err := run.ClientMain(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "locksoak client:", err)
			os.Exit(2)
		}
		return
	}
	os.Exit(main1())
}

func main1() int {
	backend := flag.String("backend", "mem", "mem, file, redis, redlock, postgres, etcd, zookeeper, etcd-cluster or zookeeper-cluster (3 members, partitioned: needs root)")
	keys := flag.Int("keys", 4, "keys")
	clients := flag.Int("clients", 8, "clients")
	dur := flag.Duration("duration", time.Minute, "how long to run")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the clients' and the nemesis' choices")
	quick := flag.Bool("quick", false, "a short run (15s)")
	ttl := flag.Duration("ttl", 0, "lock TTL (default: the backend's, see backends.go)")
	out := flag.String("out", "", "directory for summary.json, history.json, client logs and a violation's HTML (default soak-results/<backend>-<seed>)")
	recheck := flag.String("recheck", "", "check the history a run wrote to this directory again, and rewrite its summary")
	table := flag.Bool("table", false, "print a Markdown table of the summaries in the directories given as arguments")
	flag.Parse()
	if *table {
		return printTable(flag.Args())
	}
	if *recheck != "" {
		sum, err := run.Recheck(*recheck)
		if err != nil {
			fmt.Fprintln(os.Stderr, "locksoak:", err)
			return 2
		}
		return report(sum, *recheck, time.Time{})
	}
	if *quick {
		*dur = 15 * time.Second
	}
	b, ok := backends[*backend]
	if !ok {
		fmt.Fprintf(os.Stderr, "locksoak: unknown backend %q\n", *backend)
		return 2
	}
	if *ttl == 0 {
		*ttl = b.ttl
	}
	if *out == "" {
		*out = filepath.Join("soak-results", fmt.Sprintf("%s-%d", *backend, *seed))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer testserver.Shutdown()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := config{name: *backend, keys: *keys, clients: *clients, dur: *dur, seed: *seed, ttl: *ttl, out: *out, exe: exe}
	start := time.Now()
	sum, err := b.run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "locksoak:", err)
		return 2
	}
	return report(sum, *out, start)
}

// report prints a run's summary line and violations, and returns the exit
// code: 1 on a violation, 2 when nothing was checked.
func report(sum *run.Summary, out string, start time.Time) int {
	elapsed := ""
	if !start.IsZero() {
		elapsed = time.Since(start).Round(time.Millisecond).String()
	}
	line, _ := json.Marshal(map[string]any{"backend": sum.Backend, "seed": sum.Seed, "ttl": sum.TTL, "ops": sum.Ops, "faults": sum.Faults,
		"violations": len(sum.Violations), "loss_detection_ms": sum.LossDetectionMS, "elapsed": elapsed, "out": out})
	fmt.Println(string(line))
	for _, v := range sum.Violations {
		fmt.Println("VIOLATION", v)
	}
	if sum.Ops["write"] == 0 {
		fmt.Println("locksoak: no fenced write was made: the soak checked nothing")
		return 2
	}
	if len(sum.Violations) > 0 {
		fmt.Printf("replay: locksoak -backend %s -seed %d -keys %d -clients %d -duration %s -ttl %s\n", sum.Backend, sum.Seed, sum.Keys, sum.Clients, sum.Duration, sum.TTL)
		return 1
	}
	return 0
}
