package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
)

// Bad fences and arguments are refused before the database is asked (the
// Querier here is nil: touching it would panic).
func TestSQLRefusesBadInputBeforeTheDatabase(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		f     fence.SQL
		res   string
		token uint64
	}{
		{"no dialect", fence.SQL{}, "r", 1},
		{"unknown dialect", fence.SQL{Dialect: 9}, "r", 1},
		{"table with a quote", fence.SQL{Dialect: fence.Postgres, Table: `t"; DROP TABLE x; --`}, "r", 1},
		{"table with two dots", fence.SQL{Dialect: fence.Postgres, Table: "a.b.c"}, "r", 1},
		{"table starting with a digit", fence.SQL{Dialect: fence.MySQL, Table: "1t"}, "r", 1},
		{"token 0", fence.SQL{Dialect: fence.SQLite}, "r", 0},
		{"token above BIGINT", fence.SQL{Dialect: fence.Postgres}, "r", 1 << 63},
		{"empty resource", fence.SQL{Dialect: fence.Postgres}, "", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.f.Admit(ctx, nil, c.res, c.token); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Fatalf("Admit = %v, want ErrInvalidArgument", err)
			}
			if err := c.f.On(nil).Admit(ctx, c.res, c.token); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Fatalf("On(q).Admit = %v, want ErrInvalidArgument", err)
			}
		})
	}
	if err := (fence.SQL{Table: "x"}).CreateTable(ctx, nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("CreateTable without a dialect = %v, want ErrInvalidArgument", err)
	}
	for d, want := range map[fence.Dialect]string{fence.Postgres: "Postgres", fence.MySQL: "MySQL", fence.SQLite: "SQLite", 0: "Dialect(0)"} {
		if d.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(d), d.String(), want)
		}
	}
}
