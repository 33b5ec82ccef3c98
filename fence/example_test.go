package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
)

func ExampleMemory() {
	ctx := context.Background()
	m := fence.NewMemory()
	var balance int

	// Holder with token 7 writes; the stale holder with token 5 (paused while
	// the lock passed on) is refused, and its write does not run.
	for _, token := range []uint64{7, 5, 7} {
		err := m.Guard(ctx, "account:1", token, func() error { balance += 10; return nil })
		fmt.Println("token", token, "->", err == nil, errors.Is(err, fence.ErrStale))
	}
	fmt.Println("balance:", balance)
	// Output:
	// token 7 -> true false
	// token 5 -> false true
	// token 7 -> true false
	// balance: 20
}

func ExampleHandler() {
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "stored") })
	srv := httptest.NewServer(fence.Handler(fence.NewMemory(), store))
	defer srv.Close()

	send := func(token uint64) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("data"))
		fence.SetHeader(req.Header, "report", token) // Fencing-Token: report;<token>
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	send(8)
	send(3)
	// Output:
	// 200 stored
	// 409 fence: resource "report": token 3 is stale: a newer holder has been admitted
}

// The SQL fence, in the transaction of the guarded write: the upsert in Admit
// locks the resource's row until Commit, so a stale holder's transaction gets
// ErrStale and rolls back whatever the interleaving.
func ExampleSQL() {
	ctx := context.Background()
	var db *sql.DB // sql.Open("pgx", ...), with pgx's stdlib
	var locker *lock.Locker
	f := fence.SQL{Dialect: fence.Postgres} // table distlock_fence_tokens
	if db == nil || locker == nil {
		return // this example shows the calls; it needs a database to run
	}
	if err := f.CreateTable(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	err := locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f.Admit(ctx, tx, "invoice:42", l.Token()); err != nil {
			return err // errors.Is(err, fence.ErrStale): a newer holder wrote
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invoices SET paid = true WHERE id = 42`); err != nil {
			return err
		}
		return tx.Commit()
	})
	fmt.Println(err)
}

// The per-row pattern, for a table with its own fence column: the UPDATE is
// the check and StaleIfNoRows reads its verdict.
func ExampleStaleIfNoRows() {
	ctx := context.Background()
	var db *sql.DB
	var token uint64 = 1234 // l.Token() of the lock on "invoice:42"
	if db == nil {
		return // this example shows the calls; it needs a database to run
	}
	res, err := db.ExecContext(ctx,
		`UPDATE invoices SET paid = true, fence = $1 WHERE id = 42 AND fence <= $1`, int64(token))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fence.StaleIfNoRows(res, "invoice:42", token); errors.Is(err, fence.ErrStale) {
		fmt.Println("a newer holder has written invoice 42")
	}
}
