package redisdriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// foreignEnv is a Locker over the shared server with its own prefix, and an
// operator's client.
type foreignEnv struct {
	ctx    context.Context
	admin  *redis.Client
	lk     *lock.Locker
	prefix string
}

func newForeignEnv(t *testing.T) *foreignEnv {
	t.Helper()
	url := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	prefix := "foreign-" + randomHex(4)
	d, err := New(adminClient(t, url), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithTTL(2*time.Second))
	t.Cleanup(func() { _ = lk.Close() })
	return &foreignEnv{ctx: ctx, admin: adminClient(t, url), lk: lk, prefix: prefix}
}

func (e *foreignEnv) keys(key string) keys { return keysWithPrefix(e.prefix, key) }

func TestHashAtLockKeyFailsAcquireAndIsLeftUntouched(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("report")
	if err := e.admin.HSet(e.ctx, k.Lock, "owner", "someone", "rows", "42").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lk.TryAcquire(e.ctx, "report"); !errors.Is(err, ErrWrongType) {
		t.Errorf("TryAcquire = %v, want ErrWrongType", err)
	}
	if _, err := e.lk.Acquire(e.ctx, "report"); !errors.Is(err, ErrWrongType) {
		t.Errorf("Acquire = %v, want ErrWrongType", err)
	}
	got, err := e.admin.HGetAll(e.ctx, k.Lock).Result()
	if err != nil || len(got) != 2 || got["owner"] != "someone" || got["rows"] != "42" {
		t.Errorf("the hash changed: %v, %v", got, err)
	}
	if ttl, _ := e.admin.PTTL(e.ctx, k.Lock).Result(); ttl != -1 {
		t.Errorf("the hash got a TTL: %v", ttl)
	}
	if n, _ := e.admin.Exists(e.ctx, k.Fence, k.Queue, k.Waiters).Result(); n != 0 {
		t.Errorf("%d of the driver's keys were written next to the hash", n)
	}
}

// A string the driver did not write is another owner's lock, as it is for any
// client of the SET NX pattern: acquire says ErrLocked, and neither release nor
// refresh by our owners touch it.
func TestForeignStringIsAnotherOwnersLock(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("report")
	if err := e.admin.Set(e.ctx, k.Lock, "not-ours", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lk.TryAcquire(e.ctx, "report"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire = %v, want ErrLocked", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := e.lk.Acquire(ctx, "report"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire = %v, want it to wait until its deadline", err)
	}
	if v, err := e.admin.Get(e.ctx, k.Lock).Result(); err != nil || v != "not-ours" {
		t.Errorf("the value changed: %q, %v", v, err)
	}
	if ttl, _ := e.admin.PTTL(e.ctx, k.Lock).Result(); ttl != -1 {
		t.Errorf("the value got a TTL: %v", ttl)
	}
}

// The lock key holds the plain owner with a TTL, so this driver and clients of
// the standard pattern (SET NX PX, compare-and-delete) exclude each other.
func TestStandardSetNXClientsAndThisDriverExcludeEachOther(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("job")

	l, err := e.lk.TryAcquire(e.ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.admin.SetNX(e.ctx, k.Lock, "standard-client", time.Second).Result(); err != nil || ok {
		t.Fatalf("standard SET NX while the driver holds the lock = %v, %v", ok, err)
	}
	if err := l.Release(e.ctx); err != nil {
		t.Fatal(err)
	}

	const foreignTTL = 500 * time.Millisecond
	if ok, err := e.admin.SetNX(e.ctx, k.Lock, "standard-client", foreignTTL).Result(); err != nil || !ok {
		t.Fatalf("standard SET NX after release = %v, %v", ok, err)
	}
	if _, err := e.lk.TryAcquire(e.ctx, "job"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while a standard client holds the lock = %v, want ErrLocked", err)
	}
	// The standard client never releases: the waiter takes the lock when its
	// TTL ends, told so by the server's PTTL of the key, not at the waiter's
	// own re-check, which comes a third of its lease after each look: with a
	// 30 s TTL the waiter would look again after 10 s. The bound leaves
	// seconds of slack for a loaded machine (2.7 s was seen at saturation)
	// and stays well under that re-check.
	const waiterTTL = 30 * time.Second
	start := time.Now()
	l, err = e.lk.Acquire(e.ctx, "job", lock.WithTTL(waiterTTL))
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	t.Logf("Acquire took %v after a %v foreign lock", waited.Round(time.Millisecond), foreignTTL)
	if bound := waiterTTL / 3 / 2; waited > bound {
		t.Errorf("Acquire took %v after a %v foreign lock, want under %v: it waited for its own re-check, not for the key's TTL", waited, foreignTTL, bound)
	}
	_ = l.Release(e.ctx)
}

// Foreign data under the driver's own keys of a lock is refused before
// anything is written.
func TestForeignDataInTheDriversKeysFailsAcquireCleanly(t *testing.T) {
	e := newForeignEnv(t)
	k := e.keys("batch")
	if err := e.admin.HSet(e.ctx, k.Fence, "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lk.TryAcquire(e.ctx, "batch"); !errors.Is(err, ErrForeignData) {
		t.Errorf("TryAcquire with a hash at the fence key = %v, want ErrForeignData", err)
	}
	if n, _ := e.admin.Exists(e.ctx, k.Lock).Result(); n != 0 {
		t.Error("the lock key was left behind")
	}
	if v, err := e.admin.HGet(e.ctx, k.Fence, "x").Result(); err != nil || v != "1" {
		t.Errorf("the hash at the fence key changed: %q, %v", v, err)
	}
}

// Foreign data at the labels key (a string where the driver keeps a hash) is
// ErrForeignData naming that key for a shared lock and a semaphore, and
// nothing is written. (An exclusive try's uncontended path, which never reads
// the labels key's type, takes the lock beside it: that costs no command.)
func TestForeignDataAtTheLabelsKeyIsNamedAndFailsAShapedAcquireCleanly(t *testing.T) {
	e := newForeignEnv(t)
	for _, opt := range []lock.AcquireOption{lock.WithShared(true), lock.WithPermits(3)} {
		k := e.keys("labelled")
		if err := e.admin.Set(e.ctx, k.Labels, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := e.lk.TryAcquire(e.ctx, "labelled", opt)
		if !errors.Is(err, ErrForeignData) || !strings.Contains(err.Error(), k.Labels) {
			t.Errorf("TryAcquire with a string at the labels key = %v, want ErrForeignData naming %q", err, k.Labels)
		}
		if n, _ := e.admin.Exists(e.ctx, k.Lock, k.Holders).Result(); n != 0 {
			t.Error("the lock was written")
		}
		if v, err := e.admin.Get(e.ctx, k.Labels).Result(); err != nil || v != "not a hash" {
			t.Errorf("the string at the labels key changed: %q, %v", v, err)
		}
		if err := e.admin.Del(e.ctx, k.Labels).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
