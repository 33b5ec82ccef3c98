package lock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	_ "github.com/distlock/lock/memdriver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestOpenUnknownSchemeNamesItAndListsRegistered(t *testing.T) {
	_, err := lock.Open(context.Background(), "nosuch://user:hunter2@host/x")
	if !errors.Is(err, lock.ErrUnknownScheme) {
		t.Fatalf("Open = %v, want ErrUnknownScheme", err)
	}
	msg := err.Error()
	for _, want := range []string{`"nosuch"`, "mem", "import"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error %q prints the password", msg)
	}
}

func TestOpenRejectsBadURLsWithoutPrintingPasswords(t *testing.T) {
	for _, c := range []struct {
		url  string
		want error
	}{
		{"", lock.ErrInvalidURL},
		{"no-scheme-here", lock.ErrInvalidURL},
		{"://hunter2@x", lock.ErrInvalidURL},
		{"mem://u:hunter2@host:badport/x", lock.ErrInvalidURL},
		{"mem://u:hunter2@[::1/x", lock.ErrInvalidURL},
		{"mem://u:hun%zzter2@host/x", lock.ErrInvalidURL},
		{"mem://x?ttl=soon&password=hunter2", lock.ErrInvalidURL},
		{"mem://x?ttl=-1s", lock.ErrInvalidURL},
		{"mem://x?auto_refresh=maybe", lock.ErrInvalidURL},
		{"mem://x?prefix=", lock.ErrInvalidURL},
		{"mem://x?password=hunter2&bogus=1", lock.ErrInvalidURL}, // the driver's own check
		// Server URLs inside the query, as a driver over several servers takes
		// them: raw, escaped whole, and with the password escaped within.
		{"mem://x?server=redis://:hunter2@h:1/0&bogus=1", lock.ErrInvalidURL},
		{"mem://x?server=" + url.QueryEscape("redis://u:hunter2@h:1/0?x=1") + "&bogus=1", lock.ErrInvalidURL},
		{"mem://x?server=" + url.QueryEscape("rediss://h:1/0?password=hunter2") + "&ttl=bad", lock.ErrInvalidURL},
		{"nosuch://?server=redis://:hun%2526ter2@h:1&server=" + url.QueryEscape("redis://:hunter2@h:2"), lock.ErrUnknownScheme},
	} {
		_, err := lock.Open(context.Background(), c.url)
		if err == nil {
			t.Errorf("Open(%q) succeeded", c.url)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("Open(%q) = %v, want %v", c.url, err, c.want)
		}
		var le *lock.Error
		if !errors.As(err, &le) || le.Op != "open" {
			t.Errorf("Open(%q) = %#v, want a *lock.Error with Op open", c.url, err)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "hun%zzter2") ||
			strings.Contains(msg, "hun%2526ter2") || strings.Contains(msg, "hun%26ter2") || strings.Contains(msg, "hun&ter2") {
			t.Errorf("Open(%q) error prints the password: %v", c.url, err)
		}
	}
}

func TestOpenAppliesPortableParameters(t *testing.T) {
	ctx := context.Background()
	lk, err := lock.Open(ctx, "mem://params?ttl=50ms&auto_refresh=false&prefix=app1")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// With a 50ms TTL and no refresh the lock is lost by its deadline.
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() did not close: ttl or auto_refresh from the URL was not applied")
	}
	// A different prefix is a different namespace.
	other, err := lock.Open(ctx, "mem://params?prefix=app2")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := lk.Acquire(ctx, "shared-name", lock.WithAutoRefresh(true))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	l2, err := other.TryAcquire(ctx, "shared-name")
	if err != nil {
		t.Fatalf("same key under another prefix: %v, want a separate lock", err)
	}
	_ = l2.Release(ctx)
}

func init() {
	driver.Register("anything", func(_ context.Context, cfg driver.Config) (driver.Driver, error) {
		return nopDriver{}, nil
	})
}

func TestLockerStringRedactsPassword(t *testing.T) {
	for _, raw := range []string{"anything://u:hunter2@name/x", "anything://name/x?password=hunter2&sslpassword=hunter2"} {
		lk, err := lock.Open(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if s := lk.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "anything://") {
			t.Errorf("String() = %q", s)
		}
		lk.Close()
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering mem a second time did not panic")
		}
	}()
	driver.Register("mem", func(context.Context, driver.Config) (driver.Driver, error) { return nil, nil })
}

func TestErrorWrapsSentinelAndBackendError(t *testing.T) {
	backend := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	err := &lock.Error{Op: "acquire", Key: "invoice:42", Err: errors.Join(lock.ErrLocked, backend)}
	if !errors.Is(err, lock.ErrLocked) || !errors.Is(err, backend) {
		t.Errorf("errors.Is does not reach both the sentinel and the backend error")
	}
	if got := err.Error(); !strings.HasPrefix(got, `lock: acquire "invoice:42": held by another owner`) {
		t.Errorf("Error() = %q", got)
	}
}

func TestManualRefreshExtendsDeadline(t *testing.T) {
	ctx := context.Background()
	lk, err := lock.Open(ctx, "mem://manual", lock.WithTTL(300*time.Millisecond), lock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Refreshing every 100ms keeps a 300ms lock for well over its TTL.
	for i := 0; i < 8; i++ {
		select {
		case <-l.Lost():
			t.Fatalf("lost after %d manual refreshes", i)
		case <-time.After(100 * time.Millisecond):
		}
		if err := l.Refresh(ctx); err != nil {
			t.Fatalf("Refresh %d: %v", i, err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
		t.Error("Lost() closed by a successful Release")
	default:
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "/", "../x", "a/b", "a_b", "a:b", "{t}", "\x00", "zookeeper", strings.Repeat("é", 512), strings.Repeat("é", 513), "\xff"} {
		f.Add(s)
	}
	lk := lock.New(nopDriver{})
	defer lk.Close()
	f.Fuzz(func(t *testing.T, key string) {
		_, err := lk.TryAcquire(context.Background(), key)
		valid := key != "" && len(key) <= lock.MaxKeyLen && utf8Valid(key)
		if valid && errors.Is(err, lock.ErrInvalidKey) {
			t.Fatalf("valid key %q rejected: %v", key, err)
		}
		if !valid && !errors.Is(err, lock.ErrInvalidKey) {
			t.Fatalf("invalid key %q: got %v, want ErrInvalidKey", key, err)
		}
	})
}

// templates put a password where URLs carry one: in the userinfo or in a
// password-like query parameter.
var passwordURLTemplates = []string{
	"mem://user:%s@host/x", "anything://:%s@localhost:6379/0", "anything://u:%s@h:bad/0",
	"anything://u:%s@h/db?sslmode=disable", "anything://h/db?password=%s", "anything://u:%s@h:2379,h2:2379/p",
	"zk://u:%s@h:2181/chroot", "nosuch://u:%s@h", "mem://u:%s@[::1", "anything://x?token=%s&ttl=x",
	"anything://u:%s@h/x?ttl=bad", "anything://u:%s@h/x?prefix=",
	"anything://?server=redis://:%s@h:1/0&ttl=x", "nosuch://?server=rediss://u:%s@h:1",
}

func FuzzOpenNeverPrintsPassword(f *testing.F) {
	for i := range passwordURLTemplates {
		f.Add(uint8(i), "Secr3tPw", "")
		f.Add(uint8(i), "p%41ss", "?x=%zz")
	}
	f.Fuzz(func(t *testing.T, i uint8, password, tail string) {
		if len(password) < 6 || strings.ContainsAny(password, "@/?#&") || strings.Contains(tail, password) {
			return
		}
		raw := strings.Replace(passwordURLTemplates[int(i)%len(passwordURLTemplates)], "%s", password, 1) + tail
		if strings.Contains("lock.Locker("+strings.ReplaceAll(raw, password, "xxxxx")+")", password) {
			return // the rest of the message spells the password by itself
		}
		forms := []string{password}
		if un, err := url.PathUnescape(password); err == nil && len(un) >= 6 {
			forms = append(forms, un)
		}
		lk, err := lock.Open(context.Background(), raw)
		var msg string
		if err == nil {
			msg = lk.String()
			lk.Close()
		} else {
			msg = err.Error()
		}
		for _, p := range forms {
			if strings.Contains(msg, p) {
				t.Fatalf("Open(%q) prints the password %q: %s", raw, p, msg)
			}
		}
	})
}

func TestRedactionDoesNotRematchInsideReplacements(t *testing.T) {
	// The password "x%78" is also redacted in its unescaped form "xx", which
	// occurs inside the "xxxxx" that replaced the first form.
	_, err := lock.Open(context.Background(), "anything://u:x%78@host/p?ttl=bad")
	if err == nil {
		t.Fatal("Open succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "anything://u:xxxxx@host/p") || len(msg) > 200 {
		t.Errorf("error = %q, want the URL with its password replaced once", msg)
	}
}
