package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/lock"
	_ "github.com/distlock/lock/memdriver" // registers mem://
)

func ExampleOpen() {
	ctx := context.Background()
	// The URL picks the backend: redis://, postgres://, etcd://, zk://, file://, mem://.
	locker, err := lock.Open(ctx, "mem://example-open?ttl=10s")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("holding", l.Key(), "with fencing token", l.Token())
	// Output: holding invoice:42 with fencing token 1
}

func ExampleLocker_Do() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-do")
	defer locker.Close()

	// Do acquires, keeps the lock refreshed, cancels ctx if the lock is lost,
	// and releases when fn returns: the pattern otherwise written by hand.
	err := locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		fmt.Println("only one replica runs this at a time")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// only one replica runs this at a time
	// err: <nil>
}

func ExampleLocker_AcquireAll() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-all")
	defer locker.Close()

	// Both accounts, or neither. Another transfer naming them in the other
	// order cannot deadlock with this one: every set is taken in one order.
	set, err := locker.AcquireAll(ctx, []string{"account:bob", "account:alice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Release(ctx)
	fmt.Println("holding", set.Keys())
	select {
	case <-set.Lost(): // any member lost: stop moving the money
		fmt.Println(set.Err())
	default:
		fmt.Println("alice's token:", set.Lock("account:alice").Token())
	}
	// Output:
	// holding [account:alice account:bob]
	// alice's token: 1
}

func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	replicaA, _ := lock.Open(ctx, "mem://example-try")
	defer replicaA.Close()
	replicaB, _ := lock.Open(ctx, "mem://example-try")
	defer replicaB.Close()

	l, _ := replicaA.TryAcquire(ctx, "cron:cleanup")
	defer l.Release(ctx)

	_, err := replicaB.TryAcquire(ctx, "cron:cleanup")
	if errors.Is(err, lock.ErrLocked) {
		fmt.Println("another replica is running the job; skipping")
	}
	// Output: another replica is running the job; skipping
}

func ExampleLock_Lost() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-lost")
	defer locker.Close()

	// Without automatic refresh the lock is lost at its validity deadline.
	l, _ := locker.Acquire(ctx, "k", lock.WithTTL(50*time.Millisecond), lock.WithAutoRefresh(false))
	select {
	case <-l.Lost():
		fmt.Println("lost: stop touching the resource")
	case <-time.After(5 * time.Second):
		fmt.Println("still held")
	}
	err := l.Release(ctx)
	fmt.Println(errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrLost))
	// Output:
	// lost: stop touching the resource
	// true true
}

func ExampleLock_Token() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-token")
	defer locker.Close()

	for i := 0; i < 3; i++ {
		l, _ := locker.Acquire(ctx, "account:7")
		// Pass the token to the protected resource, which rejects writes carrying
		// a token lower than the highest it has seen:
		//   UPDATE accounts SET balance = $1, fence = $2 WHERE id = 7 AND fence < $2
		fmt.Println("token", l.Token())
		l.Release(ctx)
	}
	// Output:
	// token 1
	// token 2
	// token 3
}

func ExampleWithShared() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-shared")
	defer locker.Close()

	// Readers share the key; a writer waits for them, and readers that come
	// after a waiting writer wait behind it (writer preference, on mem).
	r1, _ := locker.Acquire(ctx, "config", lock.WithShared(true))
	r2, _ := locker.Acquire(ctx, "config", lock.WithShared(true))
	fmt.Println("two readers hold config")

	_, err := locker.TryAcquire(ctx, "config")
	fmt.Println("writer while readers hold:", errors.Is(err, lock.ErrLocked))

	r1.Release(ctx)
	r2.Release(ctx)
	w, _ := locker.Acquire(ctx, "config")
	defer w.Release(ctx)
	// The writer's token is larger than every reader's before it: a resource
	// that keeps the highest token seen fences late readers out.
	fmt.Println("writer's token fences the readers:", w.Token() > r1.Token() && w.Token() > r2.Token())
	// Output:
	// two readers hold config
	// writer while readers hold: true
	// writer's token fences the readers: true
}

func ExampleWithPermits() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-permits")
	defer locker.Close()

	// At most two exports run at once; each holder has its own Lock, with its
	// own Lost channel, refresh and release.
	two := lock.WithPermits(2)
	a, _ := locker.Acquire(ctx, "exports", two)
	b, _ := locker.Acquire(ctx, "exports", two)
	defer b.Release(ctx)

	_, err := locker.TryAcquire(ctx, "exports", two)
	fmt.Println("third export while two run:", errors.Is(err, lock.ErrLocked))

	a.Release(ctx)
	c, err := locker.TryAcquire(ctx, "exports", two)
	fmt.Println("third export after one ended:", err == nil)
	defer c.Release(ctx)

	// Every user of the key must give the same number of permits.
	_, err = locker.TryAcquire(ctx, "exports", lock.WithPermits(3))
	fmt.Println("another number of permits:", errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// third export while two run: true
	// third export after one ended: true
	// another number of permits: true
}

func ExampleLocker_Campaign() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-campaign", lock.WithOwnerName("web-1"))
	defer locker.Close()

	// Campaign blocks until this process leads "scheduler"; the value is
	// published with the leadership (here, where to reach the leader).
	lead, err := locker.Campaign(ctx, "scheduler", "10.0.0.7:8080")
	if err != nil {
		return
	}
	l, _ := locker.Leader(ctx, "scheduler")
	fmt.Println("leader:", l.Owner, l.Value, "term", l.Token)

	// Work as the leader until the leadership is lost or given up.
	select {
	case <-lead.Lost():
		fmt.Println("lost:", lead.Err())
	default:
		_ = lead.Resign(ctx)
	}
	_, err = locker.Leader(ctx, "scheduler")
	fmt.Println("after Resign:", errors.Is(err, lock.ErrNoLeader))
	// Output:
	// leader: web-1 10.0.0.7:8080 term 1
	// after Resign: true
}

func ExampleLocker_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locker, _ := lock.Open(ctx, "mem://example-observe")
	defer locker.Close()

	changes := locker.Observe(ctx, "scheduler")
	fmt.Println("elected:", (<-changes).Elected)

	lead, _ := locker.Campaign(ctx, "scheduler", "10.0.0.7:8080")
	l := <-changes
	fmt.Println("elected:", l.Elected, l.Value)

	_ = lead.Resign(ctx)
	fmt.Println("elected:", (<-changes).Elected)
	// Output:
	// elected: false
	// elected: true 10.0.0.7:8080
	// elected: false
}

func ExampleLocker_Inspect() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-inspect", lock.WithOwnerName("billing-2"))
	defer locker.Close()

	l, _ := locker.Acquire(ctx, "invoice:42")
	in, _ := locker.Inspect(ctx, "invoice:42")
	fmt.Println(in.Held, in.Holders, in.Owner, in.Token == l.Token())

	// An operator frees a stuck lock; its holder learns why, and the next
	// holder's token fences it out.
	_ = locker.ForceRelease(ctx, "invoice:42")
	<-l.Lost()
	fmt.Println(errors.Is(l.Err(), lock.ErrForceReleased))
	// Output:
	// true 1 billing-2 true
	// true
}

func ExampleFromContext() {
	ctx := context.Background()
	locker, _ := lock.Open(ctx, "mem://example-fromcontext")
	defer locker.Close()

	err := locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
		// The function Do runs finds its lock, and the fencing token to pass
		// to the resource (see package fence).
		l, _ := lock.FromContext(ctx)
		fmt.Println("holding", l.Key(), "with a token:", l.Token() > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// holding invoice:42 with a token: true
	// err: <nil>
}

func ExampleWithRequired() {
	ctx := context.Background()
	// A program that fences its writes refuses to start on a backend without
	// tokens (redlock://, redis://...?fencing=false) instead of writing token 0.
	locker, err := lock.Open(ctx, "mem://example-required", lock.WithRequired(lock.Capabilities{Fencing: true}))
	if errors.Is(err, lock.ErrUnsupported) {
		fmt.Println("this backend has no fencing tokens:", err)
		return
	}
	defer locker.Close()
	fmt.Println("fencing:", locker.Capabilities().Fencing)
	// Output:
	// fencing: true
}
