// Command locksoak runs the randomized fault soak of issue 18 against one
// backend and checks its history (see package run). It exits 1 on any
// violation, 2 on a failure to run.
//
// So far its clients are goroutines of this process, each with its own
// driver; client processes (kill, SIGSTOP) and the other networked backends
// are still to come.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/distlock/lock/driver"
	_ "github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/memdriver"
	_ "github.com/distlock/lock/redisdriver"
	"github.com/distlock/lock/soak/run"
)

func main() { os.Exit(main1()) }

func main1() int {
	backend := flag.String("backend", "mem", "mem, file or redis")
	keys := flag.Int("keys", 4, "keys")
	clients := flag.Int("clients", 8, "clients")
	dur := flag.Duration("duration", time.Minute, "how long to run")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the clients' and the nemesis' choices")
	quick := flag.Bool("quick", false, "a short run (15s)")
	ttl := flag.Duration("ttl", 300*time.Millisecond, "lock TTL")
	out := flag.String("out", "", "directory for summary.json, history.json and a violation's HTML (default soak-results/<backend>-<seed>)")
	flag.Parse()
	if *quick {
		*dur = 15 * time.Second
	}
	if *out == "" {
		*out = filepath.Join("soak-results", fmt.Sprintf("%s-%d", *backend, *seed))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p := run.InProcess{Name: *backend, Clients: *clients, Keys: *keys, TTL: *ttl, Duration: *dur, Seed: *seed, Out: *out}
	var rawURL string
	switch *backend {
	case "mem":
		rawURL = fmt.Sprintf("mem://soak-%d", *seed)
	case "file":
		dir, err := os.MkdirTemp("", "locksoak-file-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer os.RemoveAll(dir)
		rawURL = "file://" + dir
	case "redis":
		s, err := testserver.Launch("redis")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer testserver.Shutdown()
		defer s.Close()
		rawURL = s.URL()
		p.Forget = func() {
			if err := s.Restart(false); err != nil {
				fmt.Fprintln(os.Stderr, "nemesis: restart:", err)
			}
		}
		p.FreezeServer = func() func() {
			_ = s.Pause()
			return func() { _ = s.Resume() }
		}
	default:
		fmt.Fprintf(os.Stderr, "locksoak: backend %q is not supported yet (mem, file, redis)\n", *backend)
		return 2
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	open, ok := driver.Lookup(u.Scheme)
	if !ok {
		fmt.Fprintln(os.Stderr, "locksoak: no driver for", u.Scheme)
		return 2
	}
	p.NewDriver = func() (driver.Driver, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return open(ctx, driver.Config{URL: u})
	}
	start := time.Now()
	sum, err := p.Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "locksoak:", err)
		return 2
	}
	b, _ := json.Marshal(map[string]any{"backend": sum.Backend, "seed": sum.Seed, "ops": sum.Ops, "faults": sum.Faults,
		"violations": len(sum.Violations), "loss_detection_ms": sum.LossDetectionMS, "elapsed": time.Since(start).Round(time.Millisecond).String(), "out": *out})
	fmt.Println(string(b))
	for _, v := range sum.Violations {
		fmt.Println("VIOLATION", v)
	}
	if sum.Ops["write"] == 0 {
		fmt.Println("locksoak: no fenced write was made: the soak checked nothing")
		return 2
	}
	if len(sum.Violations) > 0 {
		fmt.Printf("replay: locksoak -backend %s -seed %d -keys %d -clients %d -duration %s -ttl %s\n", *backend, *seed, *keys, *clients, *dur, *ttl)
		return 1
	}
	return 0
}
