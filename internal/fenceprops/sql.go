package fenceprops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distlock/lock/fence"
)

// SQL is a database under test with an SQL fence: the same properties run on
// every dialect's server.
type SQL struct {
	DB    *sql.DB
	Fence fence.SQL
	// Retry reports whether a transaction's error is one the server asks the
	// client to retry (MySQL's deadlock); nil: none is.
	Retry func(error) bool
}

var tableSeq atomic.Int64

// newTable returns a fresh table name for one property.
func newTable(prefix string) string {
	return prefix + "_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10) + "_" + strconv.FormatInt(tableSeq.Add(1), 10)
}

func (s SQL) q(query string) string {
	// Queries are written with $n; MySQL and SQLite take ?.
	if s.Fence.Dialect == fence.Postgres {
		return query
	}
	for i := 9; i >= 1; i-- {
		query = strings.ReplaceAll(query, "$"+strconv.Itoa(i), "?")
	}
	return query
}

// Store returns a guarded value in a table of its own: Write admits the token
// with the fence in a transaction and then upserts the value in it.
func (s SQL) Store(ctx context.Context, resource string) (Store, error) {
	table := newTable("fence_guarded")
	key := "TEXT PRIMARY KEY"
	upsert := "INSERT INTO " + table + " (id, value) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET value = excluded.value"
	if s.Fence.Dialect == fence.MySQL {
		key = "VARCHAR(200) PRIMARY KEY"
		upsert = "INSERT INTO " + table + " (id, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)"
	}
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE "+table+" (id "+key+", value TEXT NOT NULL)"); err != nil {
		return Store{}, err
	}
	write := func(ctx context.Context, token uint64, value string) error {
		tx, err := s.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := s.Fence.Admit(ctx, tx, resource, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(upsert), resource, value); err != nil {
			return err
		}
		return tx.Commit()
	}
	return Store{
		Write: func(ctx context.Context, a Attempt) error {
			for {
				err := write(ctx, a.Token, a.Value)
				if err == nil || s.Retry == nil || !s.Retry(err) || ctx.Err() != nil {
					return err
				}
			}
		},
		Read: func(ctx context.Context) (string, error) {
			var v string
			err := s.DB.QueryRowContext(ctx, s.q("SELECT value FROM "+table+" WHERE id = $1"), resource).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) {
				return "", nil
			}
			return v, err
		},
	}, nil
}

// Rules checks the SQL fence's rules on s's database: CreateTable is
// idempotent; equal and larger tokens are admitted and smaller ones refused
// with ErrStale naming the resource and token, through a *sql.DB, *sql.Conn,
// *sql.Tx and On's Checker alike; and a transaction holding a token's row lock
// holds back an older token's Admit until it ends: refused if it committed,
// admitted if it rolled back.
func (s SQL) Rules(ctx context.Context) error {
	f := s.Fence
	f.Table = newTable("fence_rules")
	for range 2 {
		if err := f.CreateTable(ctx, s.DB); err != nil {
			return fmt.Errorf("CreateTable: %w", err)
		}
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	steps := []struct {
		q     fence.Querier
		token uint64
		stale bool
	}{{s.DB, 5, false}, {conn, 5, false}, {s.DB, 7, false}, {conn, 6, true}, {s.DB, 1, true}, {s.DB, 7, false}}
	for i, st := range steps {
		err := f.Admit(ctx, st.q, "r", st.token)
		if st.stale != errors.Is(err, fence.ErrStale) || (!st.stale && err != nil) {
			tx.Rollback()
			return fmt.Errorf("step %d: Admit(%d) = %v, want stale %v", i, st.token, err, st.stale)
		}
		var se *fence.StaleError
		if st.stale && (!errors.As(err, &se) || se.Resource != "r" || se.Token != st.token) {
			tx.Rollback()
			return fmt.Errorf("step %d: %#v does not name the resource and token", i, err)
		}
		// The MySQL dialect learns the highest token with the refusal.
		if st.stale && f.Dialect == fence.MySQL && se.Highest != 7 {
			tx.Rollback()
			return fmt.Errorf("step %d: %#v gives Highest %d, want 7", i, err, se.Highest)
		}
	}
	// A new resource's first token is admitted on a connection whose last
	// Admit was refused (on MySQL, the refusal's LAST_INSERT_ID must not carry
	// over to the insert).
	if err := f.Admit(ctx, conn, "fresh", 1); err != nil {
		tx.Rollback()
		return fmt.Errorf("first Admit(1) of a new resource on the connection of a refusal: %w", err)
	}
	if err := f.On(tx).Admit(ctx, "r", 6); !errors.Is(err, fence.ErrStale) {
		tx.Rollback()
		return fmt.Errorf("On(tx).Admit(6) after 7 = %v, want ErrStale", err)
	}
	if err := tx.Rollback(); err != nil {
		return err
	}
	if err := f.Admit(ctx, s.DB, "r", 0); !errors.Is(err, fence.ErrZeroToken) {
		return fmt.Errorf("Admit(0) = %v, want ErrZeroToken", err)
	}
	if got, err := s.stored(ctx, f, "r"); err != nil || got != 7 {
		return fmt.Errorf("stored token %d (%v) after the refusals, want 7", got, err)
	}

	for _, commit := range []bool{true, false} {
		resource := "held-" + strconv.FormatBool(commit)
		if err := f.Admit(ctx, s.DB, resource, 9); err != nil {
			return err
		}
		holder, err := s.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := f.Admit(ctx, holder, resource, 10); err != nil {
			holder.Rollback()
			return fmt.Errorf("holder's Admit(10): %w", err)
		}
		older := make(chan error, 1)
		go func() { older <- f.Admit(ctx, s.DB, resource, 9) }()
		// A bounded wait for something that must not happen.
		select {
		case err := <-older:
			holder.Rollback()
			return fmt.Errorf("Admit(9) returned (%v) while a transaction held token 10's row", err)
		case <-time.After(200 * time.Millisecond):
		}
		if commit {
			err = holder.Commit()
		} else {
			err = holder.Rollback()
		}
		if err != nil {
			return err
		}
		err = <-older
		if commit && !errors.Is(err, fence.ErrStale) {
			return fmt.Errorf("Admit(9) after token 10 committed = %v, want ErrStale", err)
		}
		if !commit && err != nil {
			return fmt.Errorf("Admit(9) after token 10 rolled back = %v, want admitted", err)
		}
	}
	return nil
}

func (s SQL) stored(ctx context.Context, f fence.SQL, resource string) (uint64, error) {
	table := f.Table
	if table == "" {
		table = fence.DefaultTable
	}
	var tok int64
	err := s.DB.QueryRowContext(ctx, s.q("SELECT token FROM "+table+" WHERE resource = $1"), resource).Scan(&tok)
	return uint64(tok), err
}

// PerRow checks the per-row pattern with fence.StaleIfNoRows on a table with
// its own fence column: a holder writes twice with its token, an older token's
// UPDATE changes nothing and is reported stale, and the data is the holder's.
func (s SQL) PerRow(ctx context.Context) error {
	table := newTable("fence_rows")
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE "+table+" (id INTEGER PRIMARY KEY, fence BIGINT NOT NULL, data TEXT NOT NULL)"); err != nil {
		return err
	}
	if _, err := s.DB.ExecContext(ctx, s.q("INSERT INTO "+table+" (id, fence, data) VALUES (1, 0, $1)"), ""); err != nil {
		return err
	}
	update := s.q("UPDATE " + table + " SET data = $1, fence = $2 WHERE id = 1 AND fence <= $3")
	for _, w := range []struct {
		token uint64
		data  string
		stale bool
	}{{5, "first", false}, {5, "second", false}, {4, "older", true}, {6, "newer", false}, {5, "stale", true}} {
		res, err := s.DB.ExecContext(ctx, update, w.data, int64(w.token), int64(w.token))
		if err != nil {
			return err
		}
		err = fence.StaleIfNoRows(res, "row:1", w.token)
		if w.stale != errors.Is(err, fence.ErrStale) || (!w.stale && err != nil) {
			return fmt.Errorf("UPDATE with token %d: %v, want stale %v", w.token, err, w.stale)
		}
	}
	var data string
	if err := s.DB.QueryRowContext(ctx, "SELECT data FROM "+table+" WHERE id = 1").Scan(&data); err != nil {
		return err
	}
	if data != "newer" {
		return fmt.Errorf("data %q, want the newest holder's", data)
	}
	return nil
}
