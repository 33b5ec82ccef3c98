package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/lock"
)

type otherKey struct{}

// The function Do runs finds Do's lock in its context, and in contexts derived
// from it, with the lock's key and token; nested Do calls give the innermost.
func TestFromContextGivesTheFunctionDoRunsItsLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := lock.Open(ctx, "mem://fromcontext-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if l, ok := lock.FromContext(ctx); ok || l != nil {
		t.Fatalf("FromContext(a context Do did not make) = %v, %v; want nil, false", l, ok)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if l, ok := lock.FromContext(nil); ok || l != nil {
		t.Fatalf("FromContext(nil) = %v, %v; want nil, false", l, ok)
	}
	var outerToken uint64
	err = lk.Do(ctx, "outer", func(ctx context.Context) error {
		l, ok := lock.FromContext(ctx)
		if !ok || l.Key() != "outer" || l.Token() == 0 {
			return fmt.Errorf("FromContext in Do = %v, %v", l, ok)
		}
		outerToken = l.Token()
		derived, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if d, ok := lock.FromContext(context.WithValue(derived, otherKey{}, 1)); !ok || d != l {
			return fmt.Errorf("FromContext(derived) = %v, %v; want Do's lock %v", d, ok, l)
		}
		return lk.Do(ctx, "inner", func(ctx context.Context) error {
			in, ok := lock.FromContext(ctx)
			if !ok || in.Key() != "inner" || in == l {
				return fmt.Errorf("FromContext in nested Do = %v, %v; want the inner lock", in, ok)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The token was the lock's: the next holder's is larger.
	l, err := lk.TryAcquire(ctx, "outer")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= outerToken {
		t.Fatalf("next holder's token %d is not above Do's %d", l.Token(), outerToken)
	}
}

// Do's context still reports the loss of the lock to the function, and its
// cause, through the wrapper that answers FromContext.
func TestFromContextKeepsDoCancellingOnLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := lock.Open(ctx, "mem://fromcontext-loss-"+t.Name(), lock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	err = lk.Do(ctx, "k", func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		if err := lk.ForceRelease(ctx, l.Key()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), lock.ErrLost) {
				return fmt.Errorf("cause %v, want ErrLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(20 * time.Second):
			return errors.New("Do's context was not cancelled after the lock was freed")
		}
	})
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
}
