package memdriver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
)

// A hold deleted by someone else (Delete, as an operator deleting a key) is
// reported at the holder's next refresh as expired, the way a key that ran out
// of TTL looks; a severed client's holds as a session that ended.
func TestRefreshOfADeletedOrSeveredHoldSaysWhy(t *testing.T) {
	for _, c := range []struct {
		how   string
		do    func(d *memdriver.Driver, key string)
		cause error
	}{
		{"deleted", func(d *memdriver.Driver, key string) { d.Delete(key) }, lock.ErrExpired},
		{"severed", func(d *memdriver.Driver, _ string) { d.Sever() }, lock.ErrSessionExpired},
	} {
		t.Run(c.how, func(t *testing.T) {
			ctx := context.Background()
			d := memdriver.New(t.Name())
			lk := lock.New(d, lock.WithAutoRefresh(false))
			defer lk.Close()
			l, err := lk.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			c.do(d, "k")
			if err := l.Refresh(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, c.cause) {
				t.Errorf("Refresh = %v, want ErrLost and %v", err, c.cause)
			}
			if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, c.cause) {
				t.Errorf("Err = %v, want ErrLost and %v", err, c.cause)
			}
		})
	}
}
