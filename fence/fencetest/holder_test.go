package fencetest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/filedriver"
)

// The paused holder process's settings, in its environment.
const (
	holderDirEnv     = "FENCETEST_HOLDER_DIR"     // the file backend's directory
	holderDriverEnv  = "FENCETEST_HOLDER_DRIVER"  // database/sql driver name
	holderDSNEnv     = "FENCETEST_HOLDER_DSN"     // its data source name
	holderDialectEnv = "FENCETEST_HOLDER_DIALECT" // "sqlite" or "mysql"
)

const pausedKey = "invoice:42"

func dialectOf(name string) fence.Dialect {
	if name == "mysql" {
		return fence.MySQL
	}
	return fence.SQLite
}

// writeFenced is the guarded write: in one transaction, Admit and then the
// update of the resource's row in fence_demo.
func writeFenced(ctx context.Context, db *sql.DB, d fence.Dialect, token uint64, value string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := (fence.SQL{Dialect: d}).Admit(ctx, tx, pausedKey, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE fence_demo SET value = ? WHERE id = 1`, value); err != nil {
		return err
	}
	return tx.Commit()
}

// runHolder is the paused holder: it takes the file lock, prints "token N",
// waits for a line on stdin (it is stopped and continued meanwhile), then
// makes its fenced write and prints "stale", "written" or the error.
func runHolder() int {
	ctx := context.Background()
	u := url.URL{Scheme: "file", Path: os.Getenv(holderDirEnv)}
	locker, err := lock.Open(ctx, u.String(), lock.WithTTL(200*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer locker.Close()
	db, err := sql.Open(os.Getenv(holderDriverEnv), os.Getenv(holderDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	l, err := locker.Acquire(ctx, pausedKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	if !bufio.NewScanner(os.Stdin).Scan() {
		return 1
	}
	switch err := writeFenced(ctx, db, dialectOf(os.Getenv(holderDialectEnv)), l.Token(), "first, after the pause"); {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("stale")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("written")
	}
	return 0
}
