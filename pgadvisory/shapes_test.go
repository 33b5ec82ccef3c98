package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/pgadvisory"
)

// The server's own rule, with no driver in between: once a session waits for
// an advisory lock in exclusive mode, a shared request from another session
// that arrives after it is refused by the try variant and queued behind it by
// the blocking one, though only shared holders hold the lock. The package
// documentation's writer preference rests on this (lock.c checks a new request
// against the lock's waitMask before its holders).
func TestServerQueuesSharedRequestsBehindAWaitingExclusiveOne(t *testing.T) {
	ctx := context.Background()
	dsn := testserver.Postgres(t)
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name())
	reader, writer, late, probe := connect(t, dsn), connect(t, dsn), connect(t, dsn), connect(t, dsn)

	mustExec(t, reader, `SELECT pg_advisory_lock_shared($1)`, id)
	writerIn := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, `SELECT pg_advisory_lock($1)`, id)
		writerIn <- err
	}()
	waitQueued(t, dsn, id, 1)

	var got bool
	if err := late.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared($1)`, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got {
		t.Fatal("pg_try_advisory_lock_shared granted a shared lock past a waiting exclusive request")
	}
	lateIn := make(chan error, 1)
	go func() {
		_, err := late.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, id)
		lateIn <- err
	}()
	waitQueued(t, dsn, id, 2)

	mustExec(t, reader, `SELECT pg_advisory_unlock_shared($1)`, id)
	if err := <-writerIn; err != nil {
		t.Fatal(err)
	}
	// The writer holds the lock; the late reader is still queued.
	if n := waiters(t, probe, id); n != 1 {
		t.Fatalf("%d sessions queued while the writer holds the lock, want the late reader's 1", n)
	}
	select {
	case err := <-lateIn:
		t.Fatalf("the late reader was granted the lock beside the writer (%v)", err)
	default:
	}
	mustExec(t, writer, `SELECT pg_advisory_unlock($1)`, id)
	if err := <-lateIn; err != nil {
		t.Fatal(err)
	}
}

// The same through the driver, each party a Driver of its own as a separate
// process would be: a reader arriving while a writer waits behind a reader is
// refused by TryAcquire, and its Acquire is granted only after the writer's
// release.
func TestReadersArrivingAfterAWaitingWriterGoAfterIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testserver.Postgres(t)
	id := pgadvisory.LockID(pgadvisory.DefaultPrefix, t.Name())
	_, first := openDriver(t, dsn, lock.WithShared(true))
	_, writer := openDriver(t, dsn)
	_, late := openDriver(t, dsn, lock.WithShared(true))
	probe := connect(t, dsn)

	r, err := first.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		l   *lock.Lock
		err error
	}
	writerIn := make(chan grant, 1)
	go func() {
		l, err := writer.Acquire(ctx, t.Name())
		writerIn <- grant{l, err}
	}()
	waitQueued(t, dsn, id, 1)
	if _, err := late.TryAcquire(ctx, t.Name()); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a reader's TryAcquire while a writer waits = %v, want ErrLocked", err)
	}
	lateIn := make(chan grant, 1)
	go func() {
		l, err := late.Acquire(ctx, t.Name())
		lateIn <- grant{l, err}
	}()
	waitQueued(t, dsn, id, 2)

	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-writerIn
	if w.err != nil {
		t.Fatal(w.err)
	}
	if n := waiters(t, probe, id); n != 1 {
		t.Fatalf("%d sessions queued while the writer holds the lock, want the late reader's 1", n)
	}
	select {
	case g := <-lateIn:
		t.Fatalf("the late reader was granted the lock beside the writer (%v)", g.err)
	default:
	}
	if err := w.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-lateIn
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.l.Token() <= w.l.Token() {
		t.Errorf("the late reader's token %d is not above the writer's %d", g.l.Token(), w.l.Token())
	}
	if err := g.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
