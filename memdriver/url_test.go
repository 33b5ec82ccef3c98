package memdriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
)

func TestUnknownURLParameterIsRejectedWithThePortableList(t *testing.T) {
	_, err := lock.Open(context.Background(), "mem://x?colour=blue")
	if !errors.Is(err, lock.ErrInvalidURL) {
		t.Fatalf("Open = %v, want ErrInvalidURL", err)
	}
	for _, want := range []string{"unknown parameter colour", "ttl, auto_refresh, prefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// WithPrefix namespaces a Driver from New as prefix= does one from a URL.
func TestPrefixesOfOneStoreAreIndependentAndMatchTheURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	viaNew := lock.New(memdriver.New(t.Name(), memdriver.WithPrefix("app1")))
	defer viaNew.Close()
	same, err := lock.Open(ctx, "mem://"+t.Name()+"?prefix=app1")
	if err != nil {
		t.Fatal(err)
	}
	defer same.Close()
	other := lock.New(memdriver.New(t.Name(), memdriver.WithPrefix("app2")))
	defer other.Close()

	l, err := viaNew.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := same.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("same prefix through the URL: TryAcquire = %v, want ErrLocked", err)
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("another prefix: TryAcquire = %v, want the lock", err)
	}
	_ = l2.Release(ctx)
}
