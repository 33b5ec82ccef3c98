package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distlock/lock/bench/contestants"
	"github.com/distlock/lock/bench/harness"
)

// leaderEnv, when set, makes lockbench a failover leader process: the
// variable holds a leaderSpec.
const leaderEnv = "LOCKBENCH_FAILOVER_LEADER"

// leaderSpec says which election a leader process campaigns in.
type leaderSpec struct {
	Servers    contestants.Servers
	Contestant string // its ID
	Name       string // the election
}

// leaderStartTimeout bounds a leader process's start and campaign: the
// election is fresh, so it leads at once unless something is wrong.
const leaderStartTimeout = 30 * time.Second

// runLeader is the leader process: it campaigns, writes "leading TERM" on
// stdout, and leads until stdin closes (the benchmark's end, or its death)
// or it is killed, which is what the failover scenario does.
func runLeader(spec string) int {
	var s leaderSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench leader:", err)
		return 2
	}
	cs, err := contestants.All(s.Servers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench leader:", err)
		return 2
	}
	var e *harness.Elector
	for _, c := range cs {
		if c.ID() == s.Contestant {
			e = c.Elector
		}
	}
	if e == nil {
		fmt.Fprintf(os.Stderr, "lockbench leader: no contestant %q with an election\n", s.Contestant)
		return 2
	}
	ctx := context.Background()
	start, cancel := context.WithTimeout(ctx, leaderStartTimeout)
	defer cancel()
	cm, err := e.Open(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench leader: open:", err)
		return 2
	}
	defer cm.Close()
	term, resign, err := cm.Campaign(start, s.Name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench leader: campaign:", err)
		return 2
	}
	fmt.Printf("leading %d\n", term)
	_, _ = io.Copy(io.Discard, os.Stdin)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_ = resign(rctx)
	return 0
}

// spawnLeader starts this executable as a leader process in c's election
// name and returns once it leads.
func spawnLeader(servers contestants.Servers) harness.SpawnLeader {
	return func(ctx context.Context, c *harness.Contestant, name string) (harness.LeaderProc, error) {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		spec, err := json.Marshal(leaderSpec{Servers: servers, Contestant: c.ID(), Name: name})
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), leaderEnv+"="+string(spec))
		stderr := &lockedBuffer{}
		cmd.Stderr = stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &leaderProc{cmd: cmd, stdin: stdin}
		line := make(chan string, 1)
		go func() {
			l, _ := bufio.NewReader(stdout).ReadString('\n')
			line <- l
			_, _ = io.Copy(io.Discard, stdout)
		}()
		fail := func(err error) (harness.LeaderProc, error) {
			_ = p.Kill()
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return nil, err
		}
		select {
		case l := <-line:
			t, ok := strings.CutPrefix(strings.TrimSpace(l), "leading ")
			if !ok {
				return fail(fmt.Errorf("the leader process ended without leading (said %q)", l))
			}
			if p.term, err = strconv.ParseUint(t, 10, 64); err != nil {
				return fail(fmt.Errorf("the leader process said %q: %w", l, err))
			}
			return p, nil
		case <-time.After(leaderStartTimeout + 5*time.Second):
			return fail(errors.New("the leader process did not lead in time"))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

type leaderProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	term  uint64
	once  sync.Once
	err   error
}

func (p *leaderProc) Term() uint64 { return p.term }

// Kill sends SIGKILL and reaps the process.
func (p *leaderProc) Kill() error {
	p.once.Do(func() {
		p.err = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		_ = p.stdin.Close()
	})
	return p.err
}

// lockedBuffer is a leader process's stderr, written by exec's copier and
// read on failure.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4096 {
		return len(p), nil // enough to say why
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
