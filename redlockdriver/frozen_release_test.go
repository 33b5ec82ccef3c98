package redlockdriver

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
)

// The soak's one Redlock "two holders" (docs/RELIABILITY.md, The soak) played
// step by step. A holder won the lock on two servers while the third still
// held its previous owner's key (that owner's release landed there a moment
// later); then one of the holder's two servers froze. While it is frozen:
//
//   - nobody else can win: the holder still has the other server, so a
//     majority is out of reach (safety);
//   - the holder's Refresh cannot tell (one yes, one no, one silent) and is
//     not a loss; its Release cannot tell either, and is retried, but it has
//     deleted the lock where it could, so another owner may win the two
//     servers that answer. That is no overlap: the holder gave the lock up
//     when it called Release. The soak's client recorded a Release only when
//     it returned, so a client killed between the attempts looked as if it
//     had held the lock until the kill.
func TestReleaseLeftUndecidedByAFrozenServerFreesTheServersItReached(t *testing.T) {
	ctx := testContext(t)
	servers := testserver.RedisServers(t, 3)
	admin := admins(t, servers)
	const key = DefaultPrefix + ":{k}"
	open := func() (*Driver, *lock.Locker) {
		d, err := openURL(ctx, redlockURL(servers))
		if err != nil {
			t.Fatal(err)
		}
		lk := lock.New(d, lock.WithTTL(10*time.Second))
		t.Cleanup(func() { _ = lk.Close() })
		return d, lk
	}
	holderDriver, holder := open()
	_, other := open()

	// Server 2 still has the previous owner's key: the holder wins servers 1
	// and 3 only.
	if err := admin[1].Set(ctx, key, "previous-owner", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire with servers 1 and 3 free: %v", err)
	}
	// The round ended at two yes; its request to server 2 finds the key
	// there before the previous owner's release lands.
	holderDriver.settle()
	if err := admin[1].Del(ctx, key).Err(); err != nil { // the previous owner's release lands
		t.Fatal(err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = servers[2].Resume()
		}
	}()

	if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryAcquire while the holder keeps server 1 and server 3 is frozen = %v, want ErrLocked", err)
	}
	owner := admin[0].Get(ctx, key).Val()
	if owner == "" || owner == "previous-owner" {
		t.Fatalf("server 1 holds %q, want the holder's lock", owner)
	}
	err = l.Refresh(ctx)
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrLost) || !isOpen(l) {
		t.Fatalf("Refresh with one yes, one no and one frozen server = %v (lock open: %v), want ErrUnavailable and the lock kept", err, isOpen(l))
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Release with one yes, one no and one frozen server = %v, want ErrUnavailable (outcome unknown)", err)
	}
	if n := admin[0].Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("server 1 still has the lock after the holder's Release reached it")
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the holder's undecided Release freed servers 1 and 2 = %v, want the lock", err)
	}

	if err := servers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release retried once the frozen server answers = %v, want nil", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("the second owner's Release = %v, want nil (its majority untouched)", err)
	}
}
