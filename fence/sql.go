package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/distlock/lock/driver"
)

// DefaultTable is the table SQL uses when its Table is empty. It is not
// "distlock_fence": that is the name of the PostgreSQL driver's default fencing
// sequence, and CREATE TABLE IF NOT EXISTS would pass silently over it.
const DefaultTable = "distlock_fence_tokens"

// Dialect is the SQL flavour of an SQL fence's database.
type Dialect int

// The dialects. The zero Dialect is none: an SQL fence without one returns an
// error matching lock.ErrInvalidArgument.
const (
	// Postgres is PostgreSQL 9.5 or later (INSERT ... ON CONFLICT).
	Postgres Dialect = iota + 1
	// MySQL is MySQL 8 or MariaDB 10.5 or later, InnoDB tables.
	MySQL
	// SQLite is SQLite 3.35 or later (upsert with RETURNING).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Querier is what *sql.DB, *sql.Tx and *sql.Conn all have.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL is a fence whose tokens live in a table of the database that holds the
// resource, one row per resource name. Called inside the transaction of the
// guarded write and before it, Admit makes the write commit only if the token
// is current: its one statement upserts the resource's row and takes the row's
// lock until the transaction ends, so two writers with different tokens
// serialise on that row and the older one gets ErrStale whatever the
// interleaving. Called outside a transaction (q a *sql.DB), Admit only records
// the token, and the write that follows is not fenced.
//
// Tokens are stored as a signed 64-bit BIGINT; no driver issues a token above
// 2^63-1, and Admit refuses one with an error matching lock.ErrInvalidArgument.
//
// For a table that carries its own fence column, no SQL fence is needed: see
// StaleIfNoRows.
type SQL struct {
	Dialect Dialect
	Table   string // the table's name, optionally schema-qualified; DefaultTable if empty
}

// CreateTable creates the fence's table if it does not exist, and then checks
// that what bears its name is a fence table (a relation with resource and token
// columns), so a sequence, view or unrelated table of that name is an error
// rather than silently passed over. Calling it again is harmless.
func (f SQL) CreateTable(ctx context.Context, db *sql.DB) error {
	table, err := f.table()
	if err != nil {
		return err
	}
	var ddl string
	switch f.Dialect {
	case Postgres:
		ddl = "CREATE TABLE IF NOT EXISTS " + table + " (resource TEXT PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0))"
	case MySQL:
		// VARBINARY: names compare byte for byte, and 1024 bytes fit an InnoDB key.
		ddl = "CREATE TABLE IF NOT EXISTS " + table + " (resource VARBINARY(1024) NOT NULL PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0)) ENGINE=InnoDB"
	case SQLite:
		ddl = "CREATE TABLE IF NOT EXISTS " + table + " (resource TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL CHECK (token > 0))"
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("fence: create table %s: %w", table, err)
	}
	// The probe reads no row; it fails when the relation lacks the columns.
	rows, err := db.QueryContext(ctx, "SELECT resource, token FROM "+table+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("fence: %s exists but is not a fence table (resource, token): %w", table, err)
	}
	return rows.Close()
}

// Admit admits token for resource if it is at least the largest token the table
// holds for resource, recording it, and returns an error matching ErrStale
// otherwise. Inside a transaction the resource's row stays locked until the
// transaction ends, so no other token is admitted for resource meanwhile; a
// transaction whose Admit failed with ErrStale should be rolled back. On MySQL,
// two transactions that admit a resource's first token at once can deadlock;
// the server then refuses one of them (error 1213), which the caller retries.
func (f SQL) Admit(ctx context.Context, q Querier, resource string, token uint64) error {
	if err := checkArgs(resource, token); err != nil {
		return err
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("fence: resource %q: %w: token %d is above 2^63-1, which an SQL BIGINT cannot hold", resource, driver.ErrInvalidArgument, token)
	}
	table, err := f.table()
	if err != nil {
		return err
	}
	switch f.Dialect {
	case Postgres, SQLite:
		err = f.admitReturning(ctx, q, table, resource, int64(token))
	case MySQL:
		err = f.admitMySQL(ctx, q, table, resource, int64(token))
	}
	if err != nil && !errors.Is(err, ErrStale) {
		return fmt.Errorf("fence: admit token %d for resource %q: %w", token, resource, err)
	}
	return err
}

// admitReturning runs the upsert whose RETURNING yields a row only when the
// stored token was at most ours: the row is then ours (inserted or updated),
// and with no row the stored token was larger. The conflicting row is locked
// either way.
func (f SQL) admitReturning(ctx context.Context, q Querier, table, resource string, token int64) error {
	var query string
	if f.Dialect == Postgres {
		query = "INSERT INTO " + table + " AS f (resource, token) VALUES ($1, $2) " +
			"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token RETURNING f.token"
	} else {
		query = "INSERT INTO " + table + " AS f (resource, token) VALUES (?1, ?2) " +
			"ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token RETURNING token"
	}
	var stored int64
	err := q.QueryRowContext(ctx, query, resource, token).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return stale(resource, uint64(token), 0)
	}
	return err
}

// admitMySQL runs the upsert MySQL and MariaDB both have (neither MySQL 8 nor
// every MariaDB returns rows from it). LAST_INSERT_ID(expr) makes the statement's
// result carry the token the row held before it, which the update compared with
// ours under the row's lock; a new row carries 0, which no stored token is.
// Affected-row counts would not do: with CLIENT_FOUND_ROWS a refused update
// counts as one row, like an insert.
// VALUES() in the update is what MariaDB has; MySQL 8.0.20 and later accept
// it with a deprecation warning. Tested on MariaDB 10.11 only.
func (f SQL) admitMySQL(ctx context.Context, q Querier, table, resource string, token int64) error {
	res, err := q.ExecContext(ctx, "INSERT INTO "+table+" (resource, token) VALUES (?, ?) "+
		"ON DUPLICATE KEY UPDATE token = IF(LAST_INSERT_ID(token) <= VALUES(token), VALUES(token), token)",
		resource, token)
	if err != nil {
		return err
	}
	before, err := res.LastInsertId()
	if err != nil {
		return err
	}
	if before > token {
		return stale(resource, uint64(token), uint64(before))
	}
	return nil
}

// On returns the fence as a Checker whose Admit runs on q (a transaction,
// connection or database).
func (f SQL) On(q Querier) Checker { return sqlChecker{f: f, q: q} }

type sqlChecker struct {
	f SQL
	q Querier
}

func (c sqlChecker) Admit(ctx context.Context, resource string, token uint64) error {
	return c.f.Admit(ctx, c.q, resource, token)
}

// table returns the fence's table name, checked to be one or two plain SQL
// identifiers, since it is written into the statements.
func (f SQL) table() (string, error) {
	switch f.Dialect {
	case Postgres, MySQL, SQLite:
	default:
		return "", fmt.Errorf("fence: %w: SQL fence without a Dialect (%v); use fence.Postgres, fence.MySQL or fence.SQLite", driver.ErrInvalidArgument, f.Dialect)
	}
	table := f.Table
	if table == "" {
		table = DefaultTable
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("fence: %w: table name %q has more than one dot", driver.ErrInvalidArgument, table)
	}
	for _, p := range parts {
		if !isIdentifier(p) {
			return "", fmt.Errorf("fence: %w: table name %q: each part must be 1 to 63 letters, digits or underscores, not starting with a digit", driver.ErrInvalidArgument, table)
		}
	}
	return table, nil
}

func isIdentifier(s string) bool {
	if s == "" || len(s) > 63 || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// StaleIfNoRows is the check of the per-row pattern, for a table that carries
// its own fence column and needs no SQL fence:
//
//	res, err := tx.ExecContext(ctx,
//		`UPDATE invoices SET paid = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
//		paid, token, id)
//	if err != nil {
//		return err
//	}
//	if err := fence.StaleIfNoRows(res, "invoice:42", token); err != nil {
//		return err // errors.Is(err, fence.ErrStale)
//	}
//
// The UPDATE is its own check: it writes only where the row's fence is at most
// the token (<=, so one holder can write many times), and records the token
// in the same statement. StaleIfNoRows returns nil if the statement changed a
// row and an error matching ErrStale if it changed none. A missing row also
// changes none: insert rows with fence 0 beforehand, or tell the cases apart
// in the caller. On MySQL, where an UPDATE that leaves a row as it was counts
// no row, connect with CLIENT_FOUND_ROWS (go-sql-driver's clientFoundRows=true)
// or a holder's repeated identical write looks stale.
func StaleIfNoRows(res sql.Result, resource string, token uint64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: resource %q: rows affected: %w", resource, err)
	}
	if n == 0 {
		return stale(resource, token, 0)
	}
	return nil
}
