package testserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartRedis starts a private Redis server for t, without persistence, and stops it
// when t ends. args are extra redis-server arguments, such as "--appendonly", "yes".
func StartRedis(t testing.TB, args ...string) *Server {
	t.Helper()
	return startPrivate(t, redisBackend, args)
}

// RedisServers starts n independent private Redis servers for t, as Redlock uses.
func RedisServers(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = StartRedis(t)
	}
	return servers
}

func startRedis(args []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, &notInstalledError{"redis-server not found in PATH"}
	}
	for attempt := 1; ; attempt++ {
		s, err := newRedis(bin, args)
		if err == nil {
			if err = s.launch(); err == nil {
				err = s.waitReady()
			}
			if err == nil {
				return s, nil
			}
			s.close()
		}
		if !addrInUse(err) || attempt == portAttempts {
			return nil, err
		}
	}
}

func newRedis(bin string, args []string) (*Server, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	dir, err := makeDir("redis")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	s := &Server{
		name:       "redis-server",
		url:        "redis://" + addr + "/0",
		addr:       addr,
		dir:        dir,
		log:        filepath.Join(dir, "server.log"),
		stopSignal: syscall.SIGTERM,
	}
	s.command = func() *exec.Cmd {
		// Logs go to stdout, which is the log file.
		argv := append([]string{
			"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no",
		}, args...)
		return exec.Command(bin, argv...)
	}
	s.probe = func(ctx context.Context) error { return redisAlive(ctx, addr) }
	s.save = func(ctx context.Context) error { return redisExpect(ctx, addr, "SAVE", "+OK") }
	s.wipe = func() error {
		for _, name := range []string{"dump.rdb", "appendonly.aof", "appendonlydir"} {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		return nil
	}
	return s, nil
}

// redisExpect sends an inline command and checks the one-line reply.
func redisExpect(ctx context.Context, addr, command, want string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	} else {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if _, err := fmt.Fprintf(conn, "%s\r\n", command); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if got := line[:len(line)-1]; got != want+"\r" {
		return fmt.Errorf("%s answered %q, want %q", command, got, want)
	}
	return nil
}

// redisAlive succeeds when the server answers PING, or refuses it for want of a
// password (a server started with --requirepass is up, too).
func redisAlive(ctx context.Context, addr string) error {
	err := redisExpect(ctx, addr, "PING", "+PONG")
	if err != nil && strings.Contains(err.Error(), `"-NOAUTH`) {
		return nil
	}
	return err
}
