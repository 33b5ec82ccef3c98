package redlockdriver

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// The password used by the tests below; "&" is escaped in the server URL, so
// it appears as "s3cr&et", "s3cr%26et" or "s3cr%2526et" depending on form.
const (
	secretPart = "s3cr"
	wrongPW    = "s3cr%26et"
)

func requireNoPassword(t *testing.T, what, msg string) {
	t.Helper()
	if strings.Contains(msg, secretPart) {
		t.Fatalf("%s shows the password: %s", what, msg)
	}
}

// A wrong password on one server fails Open, naming that server, and no error
// shows the password: from lock.Open with the server URLs written as they are
// (the form the package documentation shows), and from the driver with any form.
func TestOpenWithWrongPasswordOnOneServerShowsNoPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := testserver.RedisServers(t, 2)
	pw := testserver.StartRedis(t, "--requirepass", "right-pw")
	wrong := strings.Replace(pw.URL(), "redis://", "redis://:"+wrongPW+"@", 1)

	raw := "redlock://?server=" + servers[0].URL() + "&server=" + wrong + "&server=" + servers[1].URL()
	_, err := lock.Open(ctx, raw)
	if err == nil {
		t.Fatal("Open with a wrong password on server 2 succeeded")
	}
	requireNoPassword(t, "lock.Open's error", err.Error())
	if !strings.Contains(err.Error(), "server 2") || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Open's error does not say which server refused and why: %v", err)
	}

	for _, form := range []string{raw, encodedURL(servers[0].URL(), wrong, servers[1].URL())} {
		u, _ := url.Parse(form)
		_, err := open(ctx, driver.Config{URL: u})
		if err == nil {
			t.Fatal("open with a wrong password on server 2 succeeded")
		}
		requireNoPassword(t, "the driver's error", err.Error())
	}
}

// The portable layer prints the URL it was given in Open's errors and in
// Locker.String, with the passwords of the server URLs in its query redacted
// also when each server URL is percent-encoded whole.
func TestOpenWithEncodedServerURLsShowsNoPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := testserver.RedisServers(t, 2)
	pw := testserver.StartRedis(t, "--requirepass", "right-pw")
	wrong := strings.Replace(pw.URL(), "redis://", "redis://:"+wrongPW+"@", 1)
	_, err := lock.Open(ctx, encodedURL(servers[0].URL(), wrong, servers[1].URL()))
	if err == nil {
		t.Fatal("Open with a wrong password on server 2 succeeded")
	}
	requireNoPassword(t, "lock.Open's error", err.Error())
	right := strings.Replace(pw.URL(), "redis://", "redis://:right-pw@", 1)
	lk, err := lock.Open(ctx, encodedURL(servers[0].URL(), right, servers[1].URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if strings.Contains(lk.String(), "right-pw") {
		t.Fatalf("Locker.String shows the password: %s", lk)
	}
}

func encodedURL(servers ...string) string {
	q := make([]string, len(servers))
	for i, s := range servers {
		q[i] = "server=" + url.QueryEscape(s)
	}
	return "redlock://?" + strings.Join(q, "&")
}

// A server URL that go-redis cannot parse fails Open with ErrInvalidURL, and
// url.Parse's habit of repeating the URL does not show the password.
func TestMalformedServerURLShowsNoPassword(t *testing.T) {
	ctx := context.Background()
	raw := "redlock://?server=redis://:" + wrongPW + "@host:badport&server=redis://a:1&server=redis://b:1"
	_, err := lock.Open(ctx, raw)
	if !errors.Is(err, lock.ErrInvalidURL) {
		t.Fatalf("Open with a malformed server URL = %v, want ErrInvalidURL", err)
	}
	requireNoPassword(t, "lock.Open's error", err.Error())
	if !strings.Contains(err.Error(), "server 1") || !strings.Contains(err.Error(), "badport") {
		t.Fatalf("Open's error does not say which server URL is wrong and how: %v", err)
	}
	u, _ := url.Parse(encodedURL("redis://:"+wrongPW+"@host:badport", "redis://a:1", "redis://b:1"))
	_, err = open(ctx, driver.Config{URL: u})
	if !errors.Is(err, driver.ErrInvalidURL) {
		t.Fatalf("open with a malformed server URL = %v, want ErrInvalidURL", err)
	}
	requireNoPassword(t, "the driver's error", err.Error())
}

// Bad URLs fail Open with ErrInvalidURL and a message that says what to write.
func TestBadURLsAreRejected(t *testing.T) {
	three := "server=redis://a:1&server=redis://b:1&server=redis://c:1"
	cases := []struct{ url, want string }{
		{"redlock://", "0 servers given, Redlock needs at least 3"},
		{"redlock://?server=redis://a:1&server=redis://b:1", "2 servers given"},
		{"redlock://a:1,b:1,c:1", "the servers go in server parameters"},
		{"redlock://?" + three + "&color=red", "unknown parameter color; accepted: server, server_timeout (and the portable ttl, auto_refresh, prefix, open_timeout, close_timeout)"},
		{"redlock://?server=redis://a:1?colour%3Dred&server=redis://b:1&server=redis://c:1", "server 1 (redis://a:1?colour=red): unknown parameter colour; accepted: client_name,"},
		{"redlock://?server=http://a:1&server=redis://b:1&server=redis://c:1", `scheme "http" is not redis or rediss`},
		{"redlock://?server=redis://a:1&server=redis://a:1/0&server=redis://c:1", "servers 1 and 2 are the same server a:1/0"},
		{"redlock://?" + three + "&server_timeout=fast", `server_timeout="fast" is not a positive duration`},
		{"redlock://?" + three + "&server_timeout=-1s", "not a positive duration"},
		{"redlock://?" + three + "&server_timeout=1s&server_timeout=2s", "server_timeout given 2 times"},
		{"redlock://?server=redis://a:1/x&server=redis://b:1&server=redis://c:1", "invalid database number"},
	}
	for _, c := range cases {
		_, err := lock.Open(context.Background(), c.url)
		if !errors.Is(err, lock.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", c.url, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q) = %v, want a message containing %q", c.url, err, c.want)
		}
	}
}

// Every server parameter the driver accepts is one go-redis's parser knows.
func TestAcceptedServerParamsParse(t *testing.T) {
	for _, p := range serverParamsTLS {
		ok := false
		var last error
		for _, v := range []string{"1", "1s", "true", "3"} {
			if _, err := redis.ParseURL("rediss://a:1/0?" + p + "=" + v); err == nil {
				ok = true
				break
			} else {
				last = err
			}
		}
		if !ok {
			t.Errorf("go-redis refuses the accepted parameter %s: %v", p, last)
		}
	}
}

// With fewer than a majority reachable, Open fails with ErrNoQuorum and names
// the servers it could not reach.
func TestOpenWithoutAMajorityFails(t *testing.T) {
	servers := testserver.RedisServers(t, 3)
	for _, s := range servers[1:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := lock.Open(ctx, redlockURL(servers))
	if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "server 3") {
		t.Fatalf("Open with 1 of 3 servers up = %v, want ErrNoQuorum naming the servers", err)
	}
}

// Messages hide the passwords of the server URLs and nothing else: the user,
// host and port of the server at fault stay readable, whether the URL is
// refused by the parser or by the server. (Unparsable server URLs used to be
// shown as "unparsable URL", host and all gone.)
func TestErrorsHideOnlyPasswords(t *testing.T) {
	const secret = "s3cret-pa55"
	servers := testserver.RedisServers(t, 3)
	if err := admins(t, servers)[0].ConfigSet(context.Background(), "requirepass", "the-right-one").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rest := "&server=" + url.QueryEscape(servers[1].URL()) + "&server=" + url.QueryEscape(servers[2].URL())
	for first, want := range map[string]string{
		"redis://app:" + secret + "@127.0.0.1:notaport/0":        "redis://app:xxxxx@127.0.0.1:notaport/0",
		"redis://app:" + secret + "@10.0.0.1:6379/0?colour=blue": "redis://app:xxxxx@10.0.0.1:6379/0?colour=blue",
		"redis://ap%zzp:" + secret + "@10.0.0.1:6379/0":          "redis://ap%zzp:xxxxx@10.0.0.1:6379/0",
		"redis://:" + secret + "@" + servers[0].Addr() + "/0":    servers[0].Addr(),
	} {
		_, err := lock.Open(ctx, "redlock://?server="+url.QueryEscape(first)+rest)
		switch {
		case err == nil:
			t.Errorf("Open with server %q succeeded", want)
		case strings.Contains(err.Error(), secret):
			t.Errorf("error shows the password: %v", err)
		case !strings.Contains(err.Error(), want):
			t.Errorf("error = %v, want it to name the server as %q", err, want)
		}
	}
}

// With a majority of the servers refusing the connection (nothing listens on
// their ports), Open fails at once, not after its rounds or its open_timeout:
// the error matches ErrNoQuorum and ErrUnavailable, names the refusal
// (syscall.ECONNREFUSED) and shows no password of the refusing servers' URLs.
func TestOpenWithAMajorityRefusingFailsFastNamingTheRefusal(t *testing.T) {
	live := testserver.RedisServers(t, 2)
	q := make([]string, 0, 5)
	for _, s := range live {
		q = append(q, "server="+url.QueryEscape(s.URL()))
	}
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		_ = l.Close()
		q = append(q, "server="+url.QueryEscape("redis://:"+wrongPW+"@"+dead+"/0"))
	}
	began := time.Now()
	_, err := lock.Open(context.Background(), "redlock://?"+strings.Join(q, "&"))
	took := time.Since(began)
	t.Logf("Open with 3 of 5 servers refusing failed after %v: %v", took, err)
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Open with 3 of 5 servers refusing = %v, want an error matching ErrNoQuorum, ErrUnavailable and syscall.ECONNREFUSED", err)
	}
	if took > time.Second {
		t.Errorf("Open with 3 of 5 servers refusing took %v, want under 1s: a refusal is known at once", took)
	}
	if err != nil {
		requireNoPassword(t, "the error", err.Error())
	}
}
