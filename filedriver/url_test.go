package filedriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/filedriver"
)

func TestURLsAreCheckedWithTheReason(t *testing.T) {
	dir := t.TempDir()
	for raw, want := range map[string]string{
		"file://" + dir + "?colour=blue": "unknown parameter colour; accepted: only the portable ttl, auto_refresh, prefix, open_timeout, close_timeout",
		"file://u:pw@localhost" + dir:    "no user or password",
		"file://otherhost" + dir:         "file locks are local",
		"file:relative/dir":              "absolute path",
	} {
		_, err := lock.Open(context.Background(), raw)
		if !errors.Is(err, lock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL saying %q", raw, err, want)
		}
	}
}

// WithPrefix and prefix= name the same subdirectory, so the two exclude each
// other.
func TestPrefixOptionMatchesThePrefixParameter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()
	d, err := filedriver.New(dir, filedriver.WithPrefix("app1"))
	if err != nil {
		t.Fatal(err)
	}
	viaNew := lock.New(d)
	defer viaNew.Close()
	viaURL, err := lock.Open(ctx, "file://"+dir+"?prefix=app1")
	if err != nil {
		t.Fatal(err)
	}
	defer viaURL.Close()
	l, err := viaNew.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := viaURL.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryAcquire through the URL with the same prefix = %v, want ErrLocked", err)
	}
}
