package etcddriver

import (
	"context"
	"fmt"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/fence"
)

// TokenKeyPrefix starts the name of every key in which Fenced keeps a
// resource's fencing token: TokenKey(resource) = TokenKeyPrefix + resource.
// The tokens live apart from the values so that a range delete of the values
// leaves them: a token must outlive what it guards, or an old holder's write
// would be admitted again.
const TokenKeyPrefix = "/distlock-fence:"

// TokenKey is the key that holds resource's fencing token.
func TokenKey(resource string) string { return TokenKeyPrefix + resource }

// Fenced makes etcd the fenced resource, in two ways.
//
// Txn, Put and Delete store the token: they run the caller's operations in
// one transaction only if the writer's token is at least the largest token
// admitted before for the resource (equal is admitted: one holder writes many
// times), which then becomes the resource's, kept in TokenKey(resource). A
// smaller token is refused with an error matching fence.ErrStale, token 0 (a
// lock without fencing) with one matching fence.ErrZeroToken; a refused call
// changes nothing. These work with a token from any backend.
//
// TxnIfHeld compares the lock itself, as concurrency.Mutex.IsOwner does: it
// runs the operations only while the lock's key with create revision token
// (this driver's token, see Capabilities) still exists, so it refuses the
// writes of a holder whose lock expired or whose lease was revoked even
// before anyone else took the lock. It works only for locks of this driver
// on the same etcd cluster, and needs no token key.
//
// Only writes through Fenced are checked: a plain Put of the guarded keys is
// not.
type Fenced struct {
	KV clientv3.KV // a *clientv3.Client, or its KV
}

// tokenWidth is the width of a stored token: every uint64 in decimal, padded
// with zeros, so that etcd's byte-wise comparison of values orders tokens as
// numbers.
const tokenWidth = 20

func encodeToken(t uint64) string {
	s := strconv.FormatUint(t, 10)
	return "00000000000000000000"[len(s):] + s
}

// aboveToken is the encoding of t+1, which for the largest uint64 is one
// more than any stored token can be.
func aboveToken(t uint64) string {
	if t == ^uint64(0) {
		return "18446744073709551616"
	}
	return encodeToken(t + 1)
}

// Txn runs ops (any of Put, Delete, Get and nested Txn, on any keys but the
// token key) in one transaction if token is admitted for resource, and
// returns their responses, in order. The operations run exactly when the
// token is current: etcd compares it in the same transaction, so two
// writers with different tokens cannot both pass.
func (f Fenced) Txn(ctx context.Context, resource string, token uint64, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	return f.txn(ctx, "txn", resource, token, ops)
}

// Put puts key's value, as KV.Put does with opts, if token is admitted for
// the resource key.
func (f Fenced) Put(ctx context.Context, key, value string, token uint64, opts ...clientv3.OpOption) error {
	_, err := f.txn(ctx, "put", key, token, []clientv3.Op{clientv3.OpPut(key, value, opts...)})
	return err
}

// Delete deletes key (with opts, a range), if token is admitted for the
// resource key. The token stays, so that no older holder can write key
// again.
func (f Fenced) Delete(ctx context.Context, key string, token uint64, opts ...clientv3.OpOption) error {
	_, err := f.txn(ctx, "delete", key, token, []clientv3.Op{clientv3.OpDelete(key, opts...)})
	return err
}

// Token returns the largest token admitted for resource, 0 if none was.
func (f Fenced) Token(ctx context.Context, resource string) (uint64, error) {
	if f.KV == nil {
		return 0, fmt.Errorf("etcddriver: fencing token of %q: %w: Fenced has no KV", resource, driver.ErrInvalidArgument)
	}
	resp, err := f.KV.Get(ctx, TokenKey(resource))
	if err != nil {
		return 0, fmt.Errorf("etcddriver: fencing token of %q: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return decodeToken(resource, resp.Kvs[0].Value)
}

func decodeToken(resource string, v []byte) (uint64, error) {
	t, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil || len(v) != tokenWidth {
		return 0, fmt.Errorf("etcddriver: fencing token of %q: the token key holds %q, not a token", resource, v)
	}
	return t, nil
}

func (f Fenced) txn(ctx context.Context, op, resource string, token uint64, ops []clientv3.Op) ([]*pb.ResponseOp, error) {
	if err := f.check(ctx, op, resource, token, len(ops)); err != nil {
		return nil, err
	}
	tk, enc := TokenKey(resource), encodeToken(token)
	then := append(append(make([]clientv3.Op, 0, len(ops)+1), ops...), clientv3.OpPut(tk, enc))
	// A value compare fails on a missing key, so the first write of a
	// resource takes the outer branch; every later one the inner compare.
	// etcd has no "<=": stored < token+1, in fixed-width decimal.
	resp, err := f.KV.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(tk), "=", 0)).
		Then(then...).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(tk), "<", aboveToken(token))},
			then,
			[]clientv3.Op{clientv3.OpGet(tk)})).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcddriver: fenced %s %q: %w", op, resource, err)
	}
	if resp.Succeeded {
		return resp.Responses[:len(ops)], nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return inner.Responses[:len(ops)], nil
	}
	kvs := inner.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 { // the transaction saw the key, and is atomic
		return nil, fmt.Errorf("etcddriver: fenced %s %q: the token key vanished within a transaction", op, resource)
	}
	held, err := decodeToken(resource, kvs[0].Value)
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("etcddriver: fenced %s: %w", op, &fence.StaleError{Resource: resource, Token: token, Highest: held})
}

// check returns the error for bad arguments (or an f without KV) or a
// context already done, before anything is sent.
func (f Fenced) check(ctx context.Context, op, resource string, token uint64, nops int) error {
	switch {
	case f.KV == nil:
		return fmt.Errorf("etcddriver: fenced %s %q: %w: Fenced has no KV", op, resource, driver.ErrInvalidArgument)
	case token == 0:
		return fmt.Errorf("etcddriver: fenced %s %q: %w", op, resource, fence.ErrZeroToken)
	case resource == "":
		return fmt.Errorf("etcddriver: fenced %s: %w: empty resource", op, driver.ErrInvalidArgument)
	case nops == 0:
		return fmt.Errorf("etcddriver: fenced %s %q: %w: no operations", op, resource, driver.ErrInvalidArgument)
	case ctx.Err() != nil:
		return fmt.Errorf("etcddriver: fenced %s %q: %w", op, resource, ctx.Err())
	}
	return nil
}

// LockPrefix is Driver.LockPrefix for a driver on prefix (DefaultPrefix when
// empty): the lock's name for TxnIfHeld, concurrency.NewMutex and etcdctl
// lock, for a program that opened its Locker by URL (the URL's path is the
// prefix).
func LockPrefix(prefix, key string) string { return lockPrefix(normalizePrefix(prefix), key) }

// TxnIfHeld runs ops in one transaction while the lock named lockPrefix
// (Driver.LockPrefix of its key) is held with token, and returns their
// responses, in order; otherwise it changes nothing and returns an error
// matching fence.ErrStale. A hold is its key in the lock's range with create
// revision token: TxnIfHeld reads the range for it, then compares that key's
// create revision in the transaction (concurrency.Mutex.IsOwner's compare),
// so a key deleted between the two fails the compare.
func (f Fenced) TxnIfHeld(ctx context.Context, lockPrefix string, token uint64, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	if err := f.check(ctx, "txn if held", lockPrefix, token, len(ops)); err != nil {
		return nil, err
	}
	if token > 1<<63-1 {
		return nil, &lostHold{lock: lockPrefix, token: token} // no revision is that large
	}
	rev := int64(token)
	got, err := f.KV.Get(ctx, lockPrefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return nil, fmt.Errorf("etcddriver: fenced txn if held %q: %w", lockPrefix, err)
	}
	if len(got.Kvs) == 0 {
		return nil, &lostHold{lock: lockPrefix, token: token}
	}
	resp, err := f.KV.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(got.Kvs[0].Key)), "=", rev)).
		Then(ops...).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcddriver: fenced txn if held %q: %w", lockPrefix, err)
	}
	if !resp.Succeeded {
		return nil, &lostHold{lock: lockPrefix, token: token}
	}
	return resp.Responses, nil
}

// lostHold is TxnIfHeld's refusal: the hold's key is gone.
type lostHold struct {
	lock  string
	token uint64
}

func (e *lostHold) Error() string {
	return "etcddriver: fenced txn if held " + strconv.Quote(e.lock) + ": token " + strconv.FormatUint(e.token, 10) +
		" is stale: its lock is no longer held (its key expired, was revoked or released)"
}

// Is makes errors.Is(err, fence.ErrStale) true.
func (e *lostHold) Is(target error) bool { return target == fence.ErrStale }
