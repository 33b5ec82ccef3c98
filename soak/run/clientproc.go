package run

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/soak/check"
)

// ClientMain is a client process of a multi-process soak (locksoak -client):
// it runs Client over the backend URL against the coordinator's resource
// until SIGTERM, and writes every operation it records to out as a JSON line
// the moment it is recorded (a line written before a SIGKILL is not lost).
// The coordinator passes the arguments; the registered drivers are the
// calling program's.
func ClientMain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("locksoak -client", flag.ContinueOnError)
	id := fs.Int("id", 0, "client id")
	rawURL := fs.String("url", "", "backend URL")
	store := fs.String("store", "", "the coordinator's resource (base URL)")
	keys := fs.Int("keys", 4, "keys")
	ttl := fs.Duration("ttl", 300*time.Millisecond, "lock TTL")
	seed := fs.Int64("seed", 1, "seed of this client's choices")
	unfenced := fs.Bool("unfenced", false, "the backend gives no fencing tokens: send validity deadlines instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	u, err := url.Parse(*rawURL)
	if err != nil {
		return fmt.Errorf("backend URL: %w", err)
	}
	open, ok := driver.Lookup(u.Scheme)
	if !ok {
		return fmt.Errorf("no driver for %q", u.Scheme)
	}
	var d driver.Driver
	for {
		// The backend may be frozen or restarting when a client is
		// (re)started: wait for it as long as the soak runs.
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err = open(octx, driver.Config{URL: u})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintf(os.Stderr, "client %d: opening the backend: %v (retrying)\n", *id, err)
		sleep(ctx, 100*time.Millisecond)
	}
	var mu sync.Mutex
	record := func(o check.Op) {
		b, _ := json.Marshal(o)
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.Write(append(b, '\n'))
	}
	g := NewGate(d, *id, *ttl, record)
	lk := lock.New(g, lock.WithTTL(*ttl), lock.WithAutoRefresh(!d.Capabilities().Expiring))
	defer lk.Close()
	st := httpStore{base: *store, c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
	defer st.c.CloseIdleConnections()
	return Client(ctx, lk, st, ClientConfig{ID: *id, Keys: *keys, TTL: *ttl, Seed: *seed, Record: record, Gate: g, Unfenced: *unfenced})
}
