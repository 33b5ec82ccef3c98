package etcddriver_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
	"github.com/distlock/lock/internal/staleholder"
)

func fencedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fencedPrefix is a prefix of its own for each run of t (-count=N): a
// token key outlives the test, by design.
func fencedPrefix(t *testing.T) string {
	return testPrefix(t) + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// wantStale fails t unless err is a refusal by the stored token by.
func wantStale(t *testing.T, err error, by uint64) {
	t.Helper()
	if got, ok := etcddriver.RefusedBy(err); !errors.Is(err, fence.ErrStale) || !ok || got != by {
		t.Fatalf("err = %v, want a refusal matching fence.ErrStale by token %d", err, by)
	}
}

func wantValue(t *testing.T, ctx context.Context, c *clientv3.Client, key, want string) {
	t.Helper()
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := "<none>"
	if len(resp.Kvs) > 0 {
		got = string(resp.Kvs[0].Value)
	}
	if got != want {
		t.Fatalf("%s = %q, want %q", key, got, want)
	}
}

func wantToken(t *testing.T, ctx context.Context, f etcddriver.Fenced, resource string, want uint64) {
	t.Helper()
	if got, err := f.Token(ctx, resource); err != nil || got != want {
		t.Fatalf("Token(%q) = %d, %v; want %d", resource, got, err, want)
	}
}

func TestFencedPutAdmitsEqualAndLargerTokensAndRefusesSmallerOnes(t *testing.T) {
	ctx := fencedCtx(t)
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	key := fencedPrefix(t) + "/invoice"
	if err := f.Put(ctx, key, "a", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(ctx, key, "b", 5); err != nil {
		t.Fatalf("the same holder's second write with its token: %v", err)
	}
	wantStale(t, f.Put(ctx, key, "old", 4), 5)
	wantValue(t, ctx, c, key, "b")
	// Fixed-width tokens: 10 is above 9 in etcd's byte order too.
	if err := f.Put(ctx, key, "c", 10); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Put(ctx, key, "old", 9), 10)
	if err := f.Put(ctx, key, "max", ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(ctx, key, "max again", ^uint64(0)); err != nil {
		t.Fatalf("the largest token's second write: %v", err)
	}
	wantStale(t, f.Put(ctx, key, "old", ^uint64(0)-1), ^uint64(0))
	wantValue(t, ctx, c, key, "max again")
	wantToken(t, ctx, f, key, ^uint64(0))
}

// A deleted key keeps its token: an older holder cannot write it again.
func TestFencedDeleteKeepsTheTokenSoOlderHoldersStayRefused(t *testing.T) {
	ctx := fencedCtx(t)
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	p := fencedPrefix(t)
	key := p + "/invoice"
	if err := f.Put(ctx, key, "v", 4); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Delete(ctx, key, 3), 4)
	wantValue(t, ctx, c, key, "v")
	if err := f.Delete(ctx, key, 6); err != nil {
		t.Fatal(err)
	}
	wantValue(t, ctx, c, key, "<none>")
	wantStale(t, f.Put(ctx, key, "old", 5), 6)
	wantValue(t, ctx, c, key, "<none>")
	// A range delete of the values leaves the token.
	if _, err := c.Delete(ctx, p+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	wantToken(t, ctx, f, key, 6)
}

// Txn runs every operation of an admitted token and none of a refused one,
// and returns the operations' responses in order.
func TestFencedTxnRunsEveryOperationOrNone(t *testing.T) {
	ctx := fencedCtx(t)
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	p := fencedPrefix(t)
	resps, err := f.Txn(ctx, p+"/order", 3,
		clientv3.OpPut(p+"/order/state", "paid"), clientv3.OpPut(p+"/order/receipt", "r-1"), clientv3.OpGet(p+"/order/state"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 3 || resps[0].GetResponsePut() == nil || resps[2].GetResponseRange() == nil ||
		string(resps[2].GetResponseRange().Kvs[0].Value) != "paid" {
		t.Fatalf("responses = %v, want the put, put and get's", resps)
	}
	_, err = f.Txn(ctx, p+"/order", 2, clientv3.OpPut(p+"/order/state", "refunded"), clientv3.OpDelete(p+"/order/receipt"))
	wantStale(t, err, 3)
	wantValue(t, ctx, c, p+"/order/state", "paid")
	wantValue(t, ctx, c, p+"/order/receipt", "r-1")
	// A second admitted Txn, on the path where the token key exists.
	if _, err := f.Txn(ctx, p+"/order", 4, clientv3.OpDelete(p+"/order/receipt")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, ctx, c, p+"/order/receipt", "<none>")
}

func TestFencedWriteRefusesBadArgumentsAndChangesNothing(t *testing.T) {
	ctx := fencedCtx(t)
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	p := fencedPrefix(t)
	key := p + "/k"
	lockName := etcddriver.LockPrefix(p, "k")
	_, errTxn := f.Txn(ctx, key, 1)
	_, errHeld := f.TxnIfHeld(ctx, lockName, 0, clientv3.OpPut(key, "v"))
	for _, tc := range []struct {
		name string
		err  error
		is   error
	}{
		{"Put with token 0", f.Put(ctx, key, "v", 0), fence.ErrZeroToken},
		{"Delete with token 0", f.Delete(ctx, key, 0), fence.ErrZeroToken},
		{"TxnIfHeld with token 0", errHeld, fence.ErrZeroToken},
		{"Txn without operations", errTxn, lock.ErrInvalidArgument},
		{"the empty resource", f.Put(ctx, "", "v", 1), lock.ErrInvalidArgument},
		{"no KV", etcddriver.Fenced{}.Put(ctx, key, "v", 1), lock.ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.is) || !errors.Is(tc.err, lock.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want %v (and lock.ErrInvalidArgument)", tc.name, tc.err, tc.is)
		}
	}
	wantValue(t, ctx, c, key, "<none>")
	wantValue(t, ctx, c, etcddriver.TokenKey(key), "<none>")
	wantValue(t, ctx, c, etcddriver.TokenKey(""), "<none>")
}

func TestFencedWriteHonoursItsContext(t *testing.T) {
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	p := fencedPrefix(t)
	key := p + "/k"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Put(ctx, key, "v", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := f.TxnIfHeld(ctx, etcddriver.LockPrefix(p, "k"), 1, clientv3.OpPut(key, "v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("TxnIfHeld with a cancelled context: %v, want context.Canceled", err)
	}
	wantValue(t, fencedCtx(t), c, key, "<none>")
}

func TestFencedWritesOfInterleavedTokensEndInTheLargestTokensWrite(t *testing.T) {
	ctx := fencedCtx(t)
	c := newClient(t, testserverEtcd(t))
	f := etcddriver.Fenced{KV: c}
	for _, op := range []string{"put", "delete"} {
		t.Run(op, func(t *testing.T) {
			key := fencedPrefix(t) + "/value"
			final, err := fenceprops.ConcurrentWriters(ctx, fenceprops.Store{
				Write: func(ctx context.Context, a fenceprops.Attempt) error {
					if a.Delete {
						return f.Delete(ctx, key, a.Token)
					}
					return f.Put(ctx, key, a.Value, a.Token)
				},
				Read: func(ctx context.Context) (string, error) {
					resp, err := c.Get(ctx, key)
					if err != nil || len(resp.Kvs) == 0 {
						return "", err
					}
					return string(resp.Kvs[0].Value), nil
				},
				Deletes:   op == "delete",
				RefusedBy: etcddriver.RefusedBy,
			}, 8, 30)
			if err != nil {
				t.Error(err)
			}
			if final.Delete {
				wantValue(t, ctx, c, key, "<none>")
			} else {
				wantValue(t, ctx, c, key, final.Value)
			}
			wantToken(t, ctx, f, key, final.Token)
		})
	}
}

func TestTxnIfHeldWritesOnlyWhileTheLockIsHeld(t *testing.T) {
	ctx := fencedCtx(t)
	url := testserverEtcd(t)
	c := newClient(t, url)
	f := etcddriver.Fenced{KV: c}
	lk, d := newLocker(t, url)
	res := fencedPrefix(t) + "-resource"
	for _, how := range []string{"released", "lease revoked"} {
		l, err := lk.Acquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.TxnIfHeld(ctx, d.LockPrefix("job"), l.Token(), clientv3.OpPut(res, how)); err != nil {
			t.Fatalf("a write while held: %v", err)
		}
		if how == "released" {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := sever(ctx, c, d); err != nil {
				t.Fatal(err)
			}
		}
		_, err = f.TxnIfHeld(ctx, d.LockPrefix("job"), l.Token(), clientv3.OpPut(res, "after"))
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("a write after the lock was %s: %v, want an error matching fence.ErrStale", how, err)
		}
		wantValue(t, ctx, c, res, how)
	}
}

// Holders take the lock in turn, each writes while it holds it and once more
// after its release, with its old token, racing the next holders' writes:
// every write in a hold is admitted, every late one refused, and the value
// is the last holder's.
func TestTxnIfHeldOfSuccessiveHoldersRefusesEveryLateWrite(t *testing.T) {
	ctx := fencedCtx(t)
	url := testserverEtcd(t)
	c := newClient(t, url)
	f := etcddriver.Fenced{KV: c}
	res := fencedPrefix(t) + "-resource"
	const holders, rounds = 4, 8
	var (
		mu      sync.Mutex
		largest uint64
		wg      sync.WaitGroup
	)
	for range holders {
		lk, d := newLocker(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := lk.Acquire(ctx, "job")
				if err != nil {
					t.Error(err)
					return
				}
				v := strconv.FormatUint(l.Token(), 10)
				if _, err := f.TxnIfHeld(ctx, d.LockPrefix("job"), l.Token(), clientv3.OpPut(res, v)); err != nil {
					t.Errorf("a write in the hold of token %d: %v", l.Token(), err)
				}
				mu.Lock()
				largest = max(largest, l.Token())
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
				if _, err := f.TxnIfHeld(ctx, d.LockPrefix("job"), l.Token(), clientv3.OpPut(res, "late "+v)); !errors.Is(err, fence.ErrStale) {
					t.Errorf("a late write with token %d: %v, want an error matching fence.ErrStale", l.Token(), err)
				}
			}
		}()
	}
	wg.Wait()
	wantValue(t, ctx, c, res, strconv.FormatUint(largest, 10))
}

// The child's side of the paused-holder tests: resource is
// "ENDPOINTS stored KEY" (Fenced.Put) or "ENDPOINTS held LOCKPREFIX KEY"
// (TxnIfHeld of a Put of KEY).
func staleHolderWrite(ctx context.Context, resource string, token uint64, value string) error {
	f := strings.Fields(resource)
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(f[0], ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	if f[1] == "stored" {
		return etcddriver.Fenced{KV: c}.Put(ctx, f[2], value, token)
	}
	_, err = etcddriver.Fenced{KV: c}.TxnIfHeld(ctx, f[2], token, clientv3.OpPut(f[3], value))
	return err
}

// Kleppmann's scenario on etcd, with either fence: a holder process takes the
// lock and writes; it is frozen past its TTL (its lease expires) or its lease
// is revoked (etcdctl lease revoke); a second holder takes the lock and
// writes; the first writes again with its old token: refused, and the value
// stays the second holder's.
func TestPausedOrSeveredHolderWriteIsRefusedAfterItsSuccessorWrote(t *testing.T) {
	url := testserverEtcd(t)
	for _, loss := range []string{"frozen past its TTL", "lease revoked"} {
		for _, mode := range []string{"stored", "held"} {
			t.Run(loss+"/"+mode, func(t *testing.T) {
				ctx := fencedCtx(t)
				c := newClient(t, url)
				f := etcddriver.Fenced{KV: c}
				p := fencedPrefix(t)
				lockName := etcddriver.LockPrefix(p, "job")
				value := p + "-resource"
				resource := strings.Join(endpoints(url), ",") + " stored " + value
				if mode == "held" {
					resource = strings.Join(endpoints(url), ",") + " held " + lockName + " " + value
				}
				const ttl = 2 * time.Second // etcd's minimum lease TTL
				first := staleholder.Start(t, staleholder.Spec{URL: url + p, Key: "job", TTL: ttl, Resource: resource, First: "holder 1, before"})
				wantValue(t, ctx, c, value, "holder 1, before")
				if loss == "lease revoked" {
					got, err := c.Get(ctx, lockName+"/", clientv3.WithPrefix())
					if err != nil || len(got.Kvs) != 1 {
						t.Fatalf("the holder's key: %v, %v", got, err)
					}
					if _, err := c.Revoke(ctx, clientv3.LeaseID(got.Kvs[0].Lease)); err != nil {
						t.Fatal(err)
					}
				} else {
					first.Freeze(t)
				}

				lk := openLocker(t, url+p, lock.WithTTL(ttl))
				l, err := lk.Acquire(ctx, "job")
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				if l.Token() <= first.Token {
					t.Fatalf("the second holder's token %d is not above the first's %d", l.Token(), first.Token)
				}
				if mode == "stored" {
					err = f.Put(ctx, value, "holder 2", l.Token())
				} else {
					_, err = f.TxnIfHeld(ctx, lockName, l.Token(), clientv3.OpPut(value, "holder 2"))
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := first.Write(t, "holder 1, after"); got != staleholder.Stale {
					t.Fatalf("the first holder's late write: %s, want %s", got, staleholder.Stale)
				}
				wantValue(t, ctx, c, value, "holder 2")
				if mode == "stored" {
					wantToken(t, ctx, f, value, l.Token())
				}
			})
		}
	}
}
