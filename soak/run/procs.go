package run

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock/internal/faultproxy"
	"github.com/distlock/lock/soak/check"
)

// Processes is a soak whose clients are separate processes (Command plus the
// client flags of ClientMain), each reaching the backend through a fault
// proxy of its own per server, so that the nemesis can cut one client off
// (blackhole), freeze its process (SIGSTOP), kill it (SIGKILL; a new client
// process takes its place) and inject the backend's own faults.
type Processes struct {
	Name string
	// URL is the backend's URL; every address of Upstreams in it is replaced
	// by the client's proxy of that server. Without Upstreams (a file
	// backend) clients use it as it is and are not blackholed.
	URL       string
	Upstreams []string
	// Command runs a client process: ClientMain's flags are appended.
	Command  []string
	Clients  int
	Keys     int
	TTL      time.Duration
	Duration time.Duration
	Seed     int64
	Out      string
	// ServerFaults are the backend's own faults, chosen at random beside the
	// client faults.
	ServerFaults []ServerFault
	// Unfenced: the backend gives no fencing tokens (Redlock); see
	// ClientConfig.Unfenced.
	Unfenced bool
}

// ServerFault is one kind of fault of the backend's servers.
type ServerFault struct {
	Name string
	// Inject injects the fault and returns once it is over; when it makes the
	// backend lose its locks, it records a check.Forget spanning the loss.
	Inject func(ctx context.Context, rng *rand.Rand, record func(check.Op)) error
}

// slot is one client place: its proxies, and its current process.
type slot struct {
	proxies []*faultproxy.Proxy
	url     string
	id      int
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and its output is read
	log     *os.File
}

// Run runs the soak and checks its history.
func (p Processes) Run(ctx context.Context) (*Summary, error) {
	res, rec := NewResource(), &Recorder{}
	rctx, cancel := context.WithTimeout(ctx, p.Duration)
	defer cancel()
	sctx, stopStore := context.WithCancel(context.Background())
	base, storeDone, err := serveResource(sctx, res)
	if err != nil {
		stopStore()
		return nil, err
	}
	defer func() { stopStore(); storeDone() }()

	slots := make([]*slot, p.Clients)
	defer func() {
		for _, s := range slots {
			if s == nil {
				continue
			}
			for _, px := range s.proxies {
				px.Close()
			}
		}
	}()
	nextID := 0
	spawn := func(s *slot) error {
		s.id = nextID
		nextID++
		args := append(append([]string(nil), p.Command[1:]...), "-client", "-id", fmt.Sprint(s.id), "-url", s.url,
			"-store", base, "-keys", fmt.Sprint(p.Keys), "-ttl", p.TTL.String(), "-seed", fmt.Sprint(p.Seed*1000+int64(s.id)), fmt.Sprintf("-unfenced=%v", p.Unfenced))
		cmd := exec.Command(p.Command[0], args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		log, err := os.Create(filepath.Join(p.Out, fmt.Sprintf("client-%d.log", s.id)))
		if err != nil {
			return err
		}
		cmd.Stderr = log
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			log.Close()
			return err
		}
		if err := cmd.Start(); err != nil {
			log.Close()
			return err
		}
		s.cmd, s.log, s.done = cmd, log, make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var o check.Op
				if json.Unmarshal(sc.Bytes(), &o) == nil {
					rec.Record(o)
				}
			}
			_ = cmd.Wait()
			log.Close()
		}(s.done)
		return nil
	}
	stopAll := func() {
		for _, s := range slots {
			if s == nil || s.cmd == nil {
				continue
			}
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, s := range slots {
			if s == nil || s.cmd == nil {
				continue
			}
			select {
			case <-s.done:
			case <-time.After(15 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
	}

	for i := range slots {
		s := &slot{url: p.URL}
		slots[i] = s
		for _, up := range p.Upstreams {
			px, err := faultproxy.Start(up)
			if err != nil {
				stopAll()
				return nil, err
			}
			s.proxies = append(s.proxies, px)
			// The address may appear as it is or query-escaped (Redlock's
			// server=redis://... parameters).
			before := s.url
			s.url = strings.ReplaceAll(s.url, up, px.Addr())
			s.url = strings.ReplaceAll(s.url, url.QueryEscape(up), url.QueryEscape(px.Addr()))
			if s.url == before {
				stopAll()
				return nil, fmt.Errorf("soak: the backend URL does not name %s, whose traffic the client's proxy would carry", up)
			}
		}
		if err := spawn(s); err != nil {
			stopAll()
			return nil, err
		}
	}
	faults := map[string]int{}
	rng := rand.New(rand.NewSource(p.Seed))
	kinds := []string{"client-freeze", "client-kill"}
	if len(p.Upstreams) > 0 {
		kinds = append(kinds, "client-blackhole")
	}
	for _, f := range p.ServerFaults {
		kinds = append(kinds, f.Name)
	}
	var nemesisErr error
	for rctx.Err() == nil {
		sleep(rctx, time.Duration(rng.Int63n(int64(2*p.TTL))))
		if rctx.Err() != nil {
			break
		}
		kind := kinds[rng.Intn(len(kinds))]
		s := slots[rng.Intn(len(slots))]
		pause := p.TTL + time.Duration(rng.Int63n(int64(p.TTL)))
		fault := check.Op{Kind: check.Fault, Key: kind, Client: -1, Call: now()}
		if strings.HasPrefix(kind, "client-") {
			fault.Client = s.id
		}
		switch kind {
		case "client-freeze":
			_ = s.cmd.Process.Signal(syscall.SIGSTOP)
			sleep(rctx, pause)
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
		case "client-kill":
			t := now()
			_ = s.cmd.Process.Kill()
			<-s.done
			rec.Record(check.Op{Kind: check.Crash, Client: s.id, Call: t, Return: now()})
			if err := spawn(s); err != nil {
				nemesisErr = err
				cancel()
			}
		case "client-blackhole":
			for _, px := range s.proxies {
				_ = px.Blackhole()
			}
			sleep(rctx, pause)
			for _, px := range s.proxies {
				_ = px.Heal()
			}
		default:
			for _, f := range p.ServerFaults {
				if f.Name == kind {
					if err := f.Inject(rctx, rng, rec.Record); err != nil {
						nemesisErr = fmt.Errorf("nemesis: %s: %w", kind, err)
						cancel()
					}
				}
			}
		}
		fault.Return = now()
		rec.Record(fault)
		faults[kind]++
	}
	stopAll()
	if nemesisErr != nil {
		return nil, nemesisErr
	}
	return finish(p.Name, p.Seed, p.Clients, p.Keys, p.Duration, p.TTL, p.Unfenced, p.Out, append(rec.Ops(), res.Ops()...), faults)
}
