package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// Behind PgBouncer in transaction mode, consecutive statements of one client
// connection run on whichever server session is free. The driver must notice
// before a lock is stranded on a session it will never see again, and say why.
func TestTransactionPoolerIsRefusedByName(t *testing.T) {
	ctx := context.Background()
	direct := testserver.Postgres(t)
	// Named prepared statements (the driver's own, and pgx's by default) are
	// lost when the session changes (PgBouncer 1.21 and later can carry
	// them); unnamed ones (the exec mode) get through, so the driver's pid
	// check has to catch the pooler. Either way the lock is refused.
	for _, tc := range []struct{ op, mode string }{
		{"TryAcquire", "exec"}, {"Acquire", "exec"},
		{"TryAcquire", "cache_statement"}, {"Acquire", "cache_statement"},
	} {
		op := tc.op
		// A pooler of its own, so that no earlier client's prepared
		// statements are on its sessions.
		bouncer := startPgBouncer(t, direct, "transaction")
		viaBouncer := withParam(t, bouncer, "default_query_exec_mode", tc.mode)
		d, err := pgadvisory.OpenForTest(ctx, viaBouncer)
		if err != nil {
			t.Fatalf("Open through PgBouncer: %v", err)
		}
		locker := lock.New(d)
		defer locker.Close()
		// Another client of the pooler keeps the server session the driver's
		// connection was set up on busy in a transaction, so the driver's next
		// statement runs on another session.
		admin := connect(t, direct)
		var setupPID int
		if err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, d.ApplicationName()).Scan(&setupPID); err != nil {
			t.Fatalf("finding the driver's server session: %v", err)
		}
		other := connect(t, withParam(t, bouncer, "default_query_exec_mode", "exec"))
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pinned int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pinned); err != nil {
			t.Fatal(err)
		}
		if pinned != setupPID {
			t.Fatalf("the other client got server session %d, not the driver's %d: PgBouncer did not reuse the idle session", pinned, setupPID)
		}

		key := t.Name() + "/" + op + "/" + tc.mode
		if op == "TryAcquire" {
			_, err = locker.TryAcquire(ctx, key)
		} else {
			_, err = locker.Acquire(ctx, key)
		}
		if !errors.Is(err, pgadvisory.ErrTransactionPooler) {
			t.Fatalf("%s through a transaction pooler (%s) = %v, want ErrTransactionPooler", op, tc.mode, err)
		}
		if !strings.Contains(err.Error(), "PgBouncer") || !strings.Contains(err.Error(), "pool_mode=transaction") {
			t.Errorf("the error does not name the cause: %v", err)
		}
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Errorf("the error does not match ErrUnsupported: %v", err)
		}
		// Sticky: the Driver takes no more locks, on any connection.
		if _, err := locker.TryAcquire(ctx, key+"/later"); !errors.Is(err, pgadvisory.ErrTransactionPooler) {
			t.Errorf("a later TryAcquire = %v, want ErrTransactionPooler", err)
		}
		_ = tx.Rollback(ctx)
		var stranded int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&stranded); err != nil {
			t.Fatal(err)
		}
		if stranded != 0 {
			t.Errorf("%s left %d advisory locks on the server", op, stranded)
		}
	}
}

// Session pooling keeps one server session per client connection, which is all
// session locks need: the driver works through it.
func TestSessionPoolerWorks(t *testing.T) {
	ctx := context.Background()
	bouncer := startPgBouncer(t, testserver.Postgres(t), "session")
	a, err := lock.Open(ctx, bouncer)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.Open(ctx, bouncer)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := a.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, t.Name()); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire by another client through the pooler = %v, want ErrLocked", err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// startPgBouncer starts PgBouncer in front of the server at dsn with the given
// pool_mode, and returns a URL through it. It skips (or fails under
// DISTLOCK_TEST_REQUIRE=1) when pgbouncer is not installed.
func startPgBouncer(t *testing.T, dsn, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/pgbouncer") // not on a user's PATH
	}
	if err != nil {
		if require, _ := strconv.ParseBool(os.Getenv(testserver.RequireEnv)); require {
			t.Fatalf("pgbouncer not found (%v); install it: apt-get install pgbouncer (scripts/install-backends does)", err)
		}
		t.Skipf("pgbouncer not found (%v); install it: apt-get install pgbouncer (scripts/install-backends does)", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: pgbouncer may run as another user, who must reach it.
	dir, err := os.MkdirTemp("", "distlock-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// Transaction pooling with two server sessions, so that the test controls
	// which one a statement gets; session pooling needs one per client.
	poolSize := 2
	if mode == "session" {
		poolSize = 20
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 50
logfile = %s
pidfile = %s
`, u.Hostname(), u.Port(), port, filepath.Join(dir, "users.txt"), mode, poolSize, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	user := u.User.Username()
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", user)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	if cred := nonRoot(t); cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	through := *u
	through.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Wait until it answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(context.Background(), through.String())
		if err == nil {
			c.Close(context.Background())
			return through.String()
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited (%v):\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nonRoot is the credential to run pgbouncer with when the tests run as root,
// which pgbouncer refuses.
func nonRoot(t *testing.T) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	t.Skip("running as root and no postgres or nobody user to run pgbouncer as")
	return nil
}
