//go:build linux

package fencetest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/internal/testserver"
)

// pausedHolder runs Kleppmann's scenario with the lock on the file backend and
// the resource a row in db: the holder process takes the lock and is frozen
// with SIGSTOP past its TTL, evicted with ForceRelease (its flock stays); the
// second holder takes the lock and writes through the SQL fence; the first is
// continued, and its fenced write is refused with ErrStale; the row holds the
// second holder's value.
func pausedHolder(t *testing.T, db *sql.DB, driverName, dsn, dialect string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := dialectOf(dialect)
	if err := (fence.SQL{Dialect: d}).CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE fence_demo (id INTEGER PRIMARY KEY, value TEXT NOT NULL)`, `INSERT INTO fence_demo (id, value) VALUES (1, '')`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderDirEnv+"="+dir, holderDriverEnv+"="+driverName, holderDSNEnv+"="+dsn, holderDialectEnv+"="+dialect)
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
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := waitStopped(t, ctx, cmd.Process.Pid)
	second, err := lock.Open(ctx, (&url.URL{Scheme: "file", Path: dir}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The holder's lease (200ms) runs out while it is frozen; its flock stays.
	for time.Since(stoppedAt) < 300*time.Millisecond {
		if _, err := second.TryAcquire(ctx, pausedKey); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire while the frozen holder keeps its flock = %v, want ErrLocked", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := second.ForceRelease(ctx, pausedKey); err != nil {
		t.Fatal(err)
	}
	err = second.Do(ctx, pausedKey, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if l.Token() <= firstToken {
			t.Errorf("second token %d is not above the frozen holder's %d", l.Token(), firstToken)
		}
		return writeFenced(ctx, db, d, l.Token(), "second")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("write\n")); err != nil {
		t.Fatal(err)
	}
	if got := next("its write's outcome"); got != "stale" {
		t.Fatalf("the resumed holder's fenced write: %q, want stale", got)
	}
	var value string
	if err := db.QueryRowContext(ctx, `SELECT value FROM fence_demo WHERE id = 1`).Scan(&value); err != nil {
		t.Fatal(err)
	}
	if value != "second" {
		t.Fatalf("the row holds %q, want the second holder's value", value)
	}
}

// waitStopped waits until the kernel shows pid stopped, and returns when.
func waitStopped(t *testing.T, ctx context.Context, pid int) time.Time {
	t.Helper()
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatal("the holder did not stop")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestPausedHolderProcessIsRefusedBySQLiteFence(t *testing.T) {
	dsn := "file:" + t.TempDir() + "/fence.db?_pragma=busy_timeout(20000)&_pragma=journal_mode(wal)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pausedHolder(t, db, "sqlite", dsn, "sqlite")
}

func TestPausedHolderProcessIsRefusedByMariaDBFence(t *testing.T) {
	dsn := testserver.StartMariaDB(t).URL()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pausedHolder(t, db, "mysql", dsn, "mysql")
}
