package pgadvisory_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// lockIDSQL is LockID as the package documentation gives it, with the prefix as
// $1 and the key as $2.
const lockIDSQL = `('x' || encode(substring(sha256(convert_to($1::text || chr(10) || $2::text, 'UTF8')) for 8), 'hex'))::bit(64)::bigint`

// lockIDBytesSQL is the documentation's form for keys a text value cannot hold,
// with the key's UTF-8 bytes as $2.
const lockIDBytesSQL = `('x' || encode(substring(sha256(convert_to($1::text || chr(10), 'UTF8') || $2::bytea) for 8), 'hex'))::bit(64)::bigint`

func TestLockIDIsTheDocumentedHash(t *testing.T) {
	// Computed by PostgreSQL 15 from the expression in the package documentation.
	if got, want := pgadvisory.LockID("distlock", "invoice:42"), int64(-6942657585546101947); got != want {
		t.Fatalf("LockID(distlock, invoice:42) = %d, want %d", got, want)
	}
}

// The newline between prefix and key keeps the hash input unambiguous only
// because a prefix cannot contain one.
func TestPrefixWithControlCharacterIsRefused(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, p := range []string{"a\nb", "a\x00", "\x7f", "bad\xff"} {
		if _, err := pgadvisory.New(pool, pgadvisory.WithPrefix(p)); err == nil {
			t.Errorf("New with prefix %q: no error", p)
		}
	}
	d, err := pgadvisory.New(pool, pgadvisory.WithPrefix("ключ: a/b"))
	if err != nil {
		t.Fatalf("New with a valid unicode prefix: %v", err)
	}
	_ = d.Close()
}

// testKeys returns keys of every kind: ASCII, the conformance suite's tricky
// ones, unicode of all plane sizes, long ones, and random UTF-8.
func testKeys(n int) []string {
	keys := []string{
		"invoice:42", "a/b", "a_b", "a:b", "a b", "../a", "..", ".", "/", "A", "a",
		"{a}b", "a%2Fb", "a\\b", "a\nb", "'", "''", "\"", "$1", "e\u0301", "é", "ключ",
		"锁", "🔒", "\u00ad", "\ufeffbom", "\U0010ffff", strings.Repeat("x", lock.MaxKeyLen),
		strings.Repeat("é", lock.MaxKeyLen/2), strings.Repeat("🔒", lock.MaxKeyLen/4),
	}
	r := rand.New(rand.NewPCG(1, 2))
	ranges := [][2]rune{{0x20, 0x7e}, {0xa0, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xfffd}, {0x10000, 0x10ffff}}
	for len(keys) < n {
		var b strings.Builder
		for l := 1 + r.IntN(40); l > 0; l-- {
			rg := ranges[r.IntN(len(ranges))]
			b.WriteRune(rg[0] + rune(r.IntN(int(rg[1]-rg[0]+1))))
		}
		keys = append(keys, b.String())
	}
	return keys
}

func TestLockIDMatchesSQLOnManyKeys(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	keys := testKeys(2000)
	for _, prefix := range []string{pgadvisory.DefaultPrefix, "billing", "préfixe ключ 🔒", "a:b/c"} {
		var ids []int64
		err := conn.QueryRow(ctx, `SELECT array_agg(`+strings.ReplaceAll(lockIDSQL, "$2::text", "k")+` ORDER BY i)
			FROM unnest($2::text[]) WITH ORDINALITY AS u(k, i)`, prefix, keys).Scan(&ids)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		for i, k := range keys {
			if want := pgadvisory.LockID(prefix, k); ids[i] != want {
				t.Errorf("prefix %q key %q: SQL gives %d, LockID %d", prefix, k, ids[i], want)
			}
		}
	}

	// Keys that a text value cannot hold, through the bytea form.
	for _, k := range []string{"a\x00b", "\x00", strings.Repeat("\x00é", 100)} {
		var id int64
		if err := conn.QueryRow(ctx, `SELECT `+lockIDBytesSQL, "distlock", []byte(k)).Scan(&id); err != nil {
			t.Fatalf("bytea form for %q: %v", k, err)
		}
		if want := pgadvisory.LockID("distlock", k); id != want {
			t.Errorf("key %q: bytea form gives %d, LockID %d", k, id, want)
		}
	}
}

// The statements in the package documentation run as printed, in psql as an
// operator would paste them, and agree with LockID.
func TestDocumentedSQLComputesLockID(t *testing.T) {
	src, err := os.ReadFile("pgadvisory.go")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, line := range strings.Split(string(src), "\n") {
		if s, ok := strings.CutPrefix(line, "//\tSELECT ('x'"); ok {
			exprs = append(exprs, "SELECT ('x'"+s)
		}
		if s, ok := strings.CutPrefix(line, "//\tsha256("); ok {
			exprs = append(exprs, "SELECT ('x' || encode(substring(sha256("+s+" for 8), 'hex'))::bit(64)::bigint")
		}
	}
	if len(exprs) != 2 {
		t.Fatalf("found %d SQL examples in the package documentation, want 2: %q", len(exprs), exprs)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i, want := range []int64{pgadvisory.LockID("distlock", "invoice:42"), pgadvisory.LockID("distlock", "key")} {
		var got int64
		if err := conn.QueryRow(ctx, strings.TrimSuffix(exprs[i], ";"), pgx.QueryExecModeSimpleProtocol).Scan(&got); err != nil {
			t.Fatalf("%s: %v", exprs[i], err)
		}
		if got != want {
			t.Errorf("%s = %d, LockID gives %d", exprs[i], got, want)
		}
	}
}

// An operator in psql sees the driver's locks: pg_try_advisory_lock on the
// documented expression fails while the driver holds the key, in either mode,
// and succeeds once it is released.
func TestDriverLockBlocksPgTryAdvisoryLockOnTheDocumentedID(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	for _, prefix := range []string{"", "billing ключ"} {
		locker, err := lock.Open(ctx, withParam(t, dsn, "prefix", orDefault(prefix)))
		if err != nil {
			t.Fatal(err)
		}
		defer locker.Close()
		operator, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer operator.Close(ctx)
		try := func(key string, shared bool) bool {
			t.Helper()
			fn := "pg_try_advisory_lock"
			if shared {
				fn += "_shared"
			}
			var ok bool
			err := operator.QueryRow(ctx, `SELECT `+fn+`(`+lockIDSQL+`)`, orDefault(prefix), key).Scan(&ok)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				unlock := strings.Replace(fn, "try_advisory_lock", "advisory_unlock", 1)
				if _, err := operator.Exec(ctx, `SELECT `+unlock+`(`+lockIDSQL+`)`, orDefault(prefix), key); err != nil {
					t.Fatal(err)
				}
			}
			return ok
		}
		for _, key := range []string{"invoice:42", "ключ/🔒", t.Name()} {
			l, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if try(key, false) || try(key, true) {
				t.Errorf("prefix %q key %q: pg_try_advisory_lock succeeded while the driver held the key", prefix, key)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if !try(key, false) {
				t.Errorf("prefix %q key %q: pg_try_advisory_lock failed after the driver released the key", prefix, key)
			}
			shared, err := locker.Acquire(ctx, key, lock.WithShared(true))
			if err != nil {
				t.Fatal(err)
			}
			if try(key, false) || !try(key, true) {
				t.Errorf("prefix %q key %q: a shared driver lock must block exclusive and admit shared", prefix, key)
			}
			if err := shared.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func orDefault(prefix string) string {
	if prefix == "" {
		return pgadvisory.DefaultPrefix
	}
	return prefix
}
