package etcddriver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"
	"github.com/distlock/lock/etcddriver"
)

// lossyKV passes every request to the (real) server but, once armed, loses the
// reply of the next delete after it was applied, and keeps the request so that a
// test can deliver it again later, as a retry or a delayed duplicate would.
type lossyKV struct {
	clientv3.KV
	mu       sync.Mutex
	armed    bool
	captured *clientv3.Op
}

var errReplyLost = errors.New("test: reply lost")

func (k *lossyKV) arm() {
	k.mu.Lock()
	k.armed = true
	k.mu.Unlock()
}

// take reports whether the op is to lose its reply, and keeps it if so.
func (k *lossyKV) take(op clientv3.Op) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.armed {
		return false
	}
	k.armed = false
	k.captured = &op
	return true
}

// replay delivers the captured request once more.
func (k *lossyKV) replay(ctx context.Context) error {
	k.mu.Lock()
	op := k.captured
	k.mu.Unlock()
	_, err := k.KV.Do(ctx, *op)
	return err
}

func (k *lossyKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	resp, err := k.KV.Delete(ctx, key, opts...)
	if err == nil && k.take(clientv3.OpDelete(key, opts...)) {
		return nil, errReplyLost
	}
	return resp, err
}

func (k *lossyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{kv: k, ctx: ctx}
}

type lossyTxn struct {
	kv               *lossyKV
	ctx              context.Context
	cmps             []clientv3.Cmp
	thenOps, elseOps []clientv3.Op
}

func (t *lossyTxn) If(c ...clientv3.Cmp) clientv3.Txn { t.cmps = append(t.cmps, c...); return t }
func (t *lossyTxn) Then(o ...clientv3.Op) clientv3.Txn {
	t.thenOps = append(t.thenOps, o...)
	return t
}
func (t *lossyTxn) Else(o ...clientv3.Op) clientv3.Txn {
	t.elseOps = append(t.elseOps, o...)
	return t
}
func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.kv.KV.Txn(t.ctx).If(t.cmps...).Then(t.thenOps...).Else(t.elseOps...).Commit()
	deletes := len(t.thenOps) > 0 && t.thenOps[0].IsDelete()
	if err == nil && deletes && t.kv.take(clientv3.OpTxn(t.cmps, t.thenOps, t.elseOps)) {
		return nil, errReplyLost
	}
	return resp, err
}

// A release whose reply was lost, delivered again after the same lease took the
// lock anew (so the new key has the very same name), leaves the new lock alone
// (etcd issue #22082).
func TestRetriedReleaseKeepsNewerLockOfSameLease(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, url)
	kv := &lossyKV{KV: c.KV}
	c.KV = kv
	d, err := etcddriver.New(c, etcddriver.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, lock.WithTTL(5*time.Second))
	defer lk.Close()

	l1 := mustAcquire(t, lk, "k")
	kv.arm()
	if err := l1.Release(ctx); !errors.Is(err, errReplyLost) {
		t.Fatalf("Release with its reply lost = %v", err)
	}
	// The holder learns at its next refresh that the key is gone, and the same
	// Locker (same lease, same key name) takes the lock again.
	if err := l1.Refresh(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Refresh after the lost release = %v, want ErrNotHeld", err)
	}
	l2 := mustAcquire(t, lk, "k")
	if l2.Token() <= l1.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l1.Token())
	}
	if err := kv.replay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of the old lock again = %v, want ErrNotHeld", err)
	}
	other, _ := newLocker(t, url)
	if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after the old release was delivered again, TryAcquire = %v, want ErrLocked: the newer lock was deleted", err)
	}
	if err := l2.Refresh(ctx); err != nil {
		t.Fatalf("the newer lock: Refresh = %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The same fault on etcd's concurrency.Mutex, whose Unlock is a plain delete: the
// repeated delete removes the session's newer lock. This shows the fault the test
// above guards against is real.
func TestConcurrencyMutexRetriedUnlockDeletesNewerLock(t *testing.T) {
	url := testserverEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, url)
	kv := &lossyKV{KV: c.KV}
	c.KV = kv
	s, err := concurrency.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	name := testPrefix(t) + "/k"
	m := concurrency.NewMutex(s, name)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	kv.arm()
	if err := m.Unlock(ctx); !errors.Is(err, errReplyLost) {
		t.Fatalf("Unlock with its reply lost = %v", err)
	}
	m2 := concurrency.NewMutex(s, name)
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kv.replay(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t, url).Get(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("the repeated Unlock left %d keys: concurrency.Mutex no longer has the fault", resp.Count)
	}
	t.Log("concurrency.Mutex: a repeated Unlock deleted the session's newer lock")
}
