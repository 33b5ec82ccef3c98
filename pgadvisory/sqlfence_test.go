package pgadvisory_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	"github.com/distlock/lock/internal/testserver"
)

// openSQL opens the test server's database through database/sql and pgx's stdlib.
func openSQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", plainURL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLFenceOnPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := fenceprops.SQL{DB: openSQL(t, testserver.Postgres(t)), Fence: fence.SQL{Dialect: fence.Postgres}}
	t.Run("AdmitsByTheRule", func(t *testing.T) {
		if err := s.Rules(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PerRowPatternRefusesOlderTokens", func(t *testing.T) {
		if err := s.PerRow(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ConcurrentWritersEndWithTheLargestToken", func(t *testing.T) {
		if err := s.Fence.CreateTable(ctx, s.DB); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			st, err := s.Store(ctx, fmt.Sprintf("%s-%d", t.Name(), i))
			if err != nil {
				t.Fatal(err)
			}
			if err := fenceprops.ConcurrentWriters(ctx, st, 24); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// The driver's default fencing sequence is named distlock_fence; a fence
// table of that name is refused by CreateTable instead of CREATE TABLE IF NOT
// EXISTS passing silently over the sequence, and the default table lives
// beside the sequence.
func TestSQLFenceTableNamedAsTheFencingSequenceIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testserver.Postgres(t)
	locker, err := lock.Open(ctx, dsn) // default prefix: sequence distlock_fence
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	l, err := locker.TryAcquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	db := openSQL(t, dsn)
	var kind string
	if err := db.QueryRowContext(ctx, `SELECT relkind::text FROM pg_class WHERE relname = 'distlock_fence'`).Scan(&kind); err != nil || kind != "S" {
		t.Fatalf("distlock_fence: relkind %q (%v), want the driver's sequence (S)", kind, err)
	}
	err = fence.SQL{Dialect: fence.Postgres, Table: "distlock_fence"}.CreateTable(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "not a fence table") {
		t.Fatalf("CreateTable(distlock_fence) over the sequence = %v, want an error saying it is not a fence table", err)
	}
	if err := (fence.SQL{Dialect: fence.Postgres}).CreateTable(ctx, db); err != nil {
		t.Fatalf("CreateTable(default %s) beside the sequence: %v", fence.DefaultTable, err)
	}
	if err := (fence.SQL{Dialect: fence.Postgres}).Admit(ctx, db, t.Name(), l.Token()); err != nil {
		t.Fatalf("Admit in the default table: %v", err)
	}
}

// The paused holder process's settings, in its environment.
const (
	sqlHolderDSNEnv = "PGADVISORY_TEST_FENCE_HOLDER_DSN"
	sqlHolderKeyEnv = "PGADVISORY_TEST_FENCE_HOLDER_KEY"
)

// runSQLHolder is the paused holder of the PostgreSQL demonstration: it takes
// the lock, prints "token N", waits for a line on stdin (it is stopped and
// continued meanwhile), and then writes the guarded row through the SQL fence
// in one transaction, printing "stale", "written" or the error.
func runSQLHolder() int {
	ctx := context.Background()
	dsn, key := os.Getenv(sqlHolderDSNEnv), os.Getenv(sqlHolderKeyEnv)
	locker, err := lock.Open(ctx, dsn, lock.WithRequired(lock.Capabilities{Fencing: true}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer locker.Close()
	db, err := sql.Open("pgx", plainURL(dsn))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	l, err := locker.Acquire(ctx, key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	if !bufio.NewScanner(os.Stdin).Scan() {
		return 1
	}
	switch err := writeFenced(ctx, db, key, l.Token(), "first, after the pause"); {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("stale")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("written")
	}
	return 0
}

// writeFenced is the guarded write: in one transaction, Admit and then the
// update of the resource's row in fence_demo.
func writeFenced(ctx context.Context, db *sql.DB, resource string, token uint64, value string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := (fence.SQL{Dialect: fence.Postgres}).Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO fence_demo (id, value) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET value = excluded.value`, resource, value); err != nil {
		return err
	}
	return tx.Commit()
}

// Kleppmann's scenario on PostgreSQL with a real holder process: it takes the
// advisory lock and is frozen with SIGSTOP; the lock is session-bound, so an
// operator evicts it with ForceRelease (its session is ended); a second holder
// takes the lock and writes the row through the SQL fence; the first is
// continued and its fenced write is refused with ErrStale; the row holds the
// second holder's value.
func TestPausedHolderProcessOnPostgresIsRefusedBySQLFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testserver.Postgres(t)
	db := openSQL(t, dsn)
	if err := (fence.SQL{Dialect: fence.Postgres}).CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS fence_demo (id TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	key := "invoice-" + t.Name() + "-" + fmt.Sprint(time.Now().UnixNano())
	// ForceRelease finds a holder's session through the holders table.
	lockURL := withParam(t, dsn, "holders", "true")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sqlHolderDSNEnv+"="+lockURL, sqlHolderKeyEnv+"="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, exited := make(chan string, 2), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	next := func(what string) string {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("holder exited before %s: %s", what, stderr.String())
			}
			return line
		case <-ctx.Done():
			t.Fatalf("no %s from the holder: %s", what, stderr.String())
		}
		return ""
	}
	var firstToken uint64
	if _, err := fmt.Sscanf(next("its token"), "token %d", &firstToken); err != nil {
		t.Fatal(err)
	}
	// The timeline, logged for docs/FENCING.md.
	begin := time.Now()
	event := func(format string, args ...any) {
		t.Logf("%7.1fms  %s", float64(time.Since(begin).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	event("holder A (pid %d) holds the advisory lock with token %d", cmd.Process.Pid, firstToken)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitProcessStopped(t, ctx, cmd.Process.Pid)
	event("A frozen (SIGSTOP); its session keeps the lock")

	second, err := lock.Open(ctx, lockURL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.TryAcquire(ctx, key); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while the frozen holder's session holds the lock = %v, want ErrLocked", err)
	}
	if err := second.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	event("operator evicts A (ForceRelease ends its session)")
	err = second.Do(ctx, key, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		event("holder B holds the lock with token %d", l.Token())
		err := writeFenced(ctx, db, key, l.Token(), "second")
		event("B's fenced write, token %d: %v", l.Token(), err)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	event("A continued (SIGCONT); it writes as if it still held the lock")
	if _, err := stdin.Write([]byte("write\n")); err != nil {
		t.Fatal(err)
	}
	if got := next("its write's outcome"); got != "stale" {
		t.Fatalf("the resumed holder's fenced write: %q, want stale", got)
	}
	event("A's fenced write, token %d: ErrStale, rolled back", firstToken)
	var value string
	if err := db.QueryRowContext(ctx, `SELECT value FROM fence_demo WHERE id = $1`, key).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != "second" {
		t.Fatalf("the row holds %q, want the second holder's value", value)
	}
}

// waitProcessStopped waits until the kernel shows pid stopped.
func waitProcessStopped(t *testing.T, ctx context.Context, pid int) {
	t.Helper()
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the holder did not stop")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
