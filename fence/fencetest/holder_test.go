package fencetest

import (
	"context"
	"database/sql"
	"strings"

	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/filedriver"
)

const pausedKey = "invoice:42"

func dialectOf(name string) fence.Dialect {
	if name == "mysql" {
		return fence.MySQL
	}
	return fence.SQLite
}

// holderResource names the paused holder's database for holderWrite.
func holderResource(driverName, dialect, dsn string) string {
	return driverName + " " + dialect + " " + dsn
}

// holderWrite is the paused holder's write (internal/staleholder): resource
// is holderResource's "DRIVER DIALECT DSN"; the write is writeFenced.
func holderWrite(ctx context.Context, resource string, token uint64, value string) error {
	f := strings.SplitN(resource, " ", 3)
	db, err := sql.Open(f[0], f[2])
	if err != nil {
		return err
	}
	defer db.Close()
	return writeFenced(ctx, db, dialectOf(f[1]), token, value)
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
