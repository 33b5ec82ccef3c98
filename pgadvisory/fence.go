package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// statements returns the lock statements, resolving (and where allowed creating)
// the fencing sequence on first use. A failure is returned to that caller and
// the next one tries again.
func (d *Driver) statements(ctx context.Context) (*lockStatements, error) {
	if s := d.stmts.Load(); s != nil {
		return s, nil
	}
	// One caller resolves it; the others wait for that within their own
	// contexts, not the resolver's.
	select {
	case d.fenceSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.fenceSem }()
	if s := d.stmts.Load(); s != nil {
		return s, nil
	}
	if d.o.fencing {
		oid, err := d.resolveFence(ctx)
		if err != nil {
			return nil, err
		}
		d.fence = oid
	}
	s := newLockStatements(d.o.fencing)
	d.stmts.Store(s)
	return s, nil
}

// fenceName is the fencing sequence's name in SQL syntax.
func (d *Driver) fenceName() string {
	if d.o.fenceSeq != "" {
		return d.o.fenceSeq
	}
	return pgx.Identifier{d.o.prefix + "_fence"}.Sanitize()
}

// createFenceSQL creates a sequence fit for fencing tokens: one value at a time
// for all sessions (CACHE 1), increasing, never wrapping around.
const createFenceSQL = "CREATE SEQUENCE IF NOT EXISTS %s AS bigint MINVALUE 1 NO CYCLE CACHE 1"

// createFence creates the sequence, durably even where synchronous_commit is off:
// a crash must not take the sequence (and the tokens it gave) back.
func createFence(ctx context.Context, conn *pgx.Conn, ident string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO on"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(createFenceSQL, ident)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// fenceGone reports whether err says the fencing sequence no longer exists.
func fenceGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" ||
		pgErr.Code == "XX000" && strings.HasPrefix(pgErr.Message, "could not open relation with OID"))
}

func (d *Driver) errFenceGone(err error) error {
	return fmt.Errorf("%w: the sequence the driver started with (OID %d) is gone; a re-created one would give smaller tokens, so restore it (or raise the new one past the last token) and reopen the driver: %w",
		ErrFenceSequence, d.fence, err)
}

// resolveFence finds the fencing sequence, creates it if missing and allowed,
// checks that it gives strictly increasing values and that we may use it, and
// returns its OID.
func (d *Driver) resolveFence(ctx context.Context) (uint32, error) {
	name := d.fenceName()
	// A few statements on a connection of its own, bounded like opening one.
	ctx, cancel := context.WithTimeout(ctx, d.connectTimeout())
	defer cancel()
	conn, err := d.connect(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgadvisory: connect: %w", err)
	}
	defer closeQuickly(conn)
	lookup := func() (*uint32, error) {
		var oid *uint32
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1)::oid`, name).Scan(&oid); err != nil {
			return nil, fmt.Errorf("%w: looking up %s: %w", ErrFenceSequence, name, err)
		}
		return oid, nil
	}
	oid, err := lookup()
	if err != nil {
		return 0, err
	}
	user := d.cfg.ConnConfig.User
	howTo := fmt.Sprintf("a user allowed to create it can run once: "+createFenceSQL+"; GRANT USAGE ON SEQUENCE %[1]s TO %s; or fencing can be turned off (fencing=false)",
		name, pgx.Identifier{user}.Sanitize())
	if oid == nil {
		if !d.o.fenceCreate {
			return 0, fmt.Errorf("%w: sequence %s does not exist and fence_create is false; %s", ErrFenceSequence, name, howTo)
		}
		var parts []string
		if err := conn.QueryRow(ctx, `SELECT parse_ident($1)`, name).Scan(&parts); err != nil {
			return 0, fmt.Errorf("%w: name %s: %w", ErrFenceSequence, name, err)
		}
		err := createFence(ctx, conn, pgx.Identifier(parts).Sanitize())
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505"):
			// Created by another client at the same moment.
		case errors.As(err, &pgErr) && pgErr.Code == "42501":
			return 0, fmt.Errorf("%w: cannot create sequence %s (%s); %s", ErrFenceSequence, name, pgErr.Message, howTo)
		case err != nil:
			return 0, fmt.Errorf("%w: creating sequence %s: %w", ErrFenceSequence, name, err)
		}
		if oid, err = lookup(); err != nil {
			return 0, err
		}
		if oid == nil {
			return 0, fmt.Errorf("%w: sequence %s not found after creating it (is the first schema of the search_path another?)", ErrFenceSequence, name)
		}
	}
	var (
		kind             string
		cache, increment *int64
		cycle            *bool
		mayUse           bool
		qualified        string
	)
	err = conn.QueryRow(ctx, `SELECT c.relkind::text, s.seqcache, s.seqincrement, s.seqcycle,
		has_sequence_privilege(c.oid, 'USAGE') OR has_sequence_privilege(c.oid, 'UPDATE'), format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_sequence s ON s.seqrelid = c.oid
		WHERE c.oid = $1`, *oid).Scan(&kind, &cache, &increment, &cycle, &mayUse, &qualified)
	if err != nil {
		return 0, fmt.Errorf("%w: inspecting %s: %w", ErrFenceSequence, name, err)
	}
	switch {
	case kind != "S":
		return 0, fmt.Errorf("%w: %s is not a sequence", ErrFenceSequence, qualified)
	case !mayUse:
		return 0, fmt.Errorf("%w: no USAGE privilege on sequence %s; %s", ErrFenceSequence, qualified, howTo)
	case cache != nil && *cache != 1:
		return 0, fmt.Errorf("%w: sequence %s has CACHE %d, so sessions hand out values out of order; run ALTER SEQUENCE %[2]s CACHE 1", ErrFenceSequence, qualified, *cache)
	case increment != nil && *increment <= 0:
		return 0, fmt.Errorf("%w: sequence %s decreases (INCREMENT %d)", ErrFenceSequence, qualified, *increment)
	case cycle != nil && *cycle:
		return 0, fmt.Errorf("%w: sequence %s may wrap around (CYCLE); run ALTER SEQUENCE %[2]s NO CYCLE", ErrFenceSequence, qualified)
	}
	return *oid, nil
}
