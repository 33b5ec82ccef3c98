package redisdriver

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestEveryURLFormParsesWithGoRedisParsers(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "redis://app:pw@10.0.0.1:6380/3?dial_timeout=2s&client_name=x"))
		if err != nil {
			t.Fatal(err)
		}
		s := o.standalone
		if s == nil || s.Addr != "10.0.0.1:6380" || s.DB != 3 || s.Username != "app" || s.Password != "pw" ||
			s.DialTimeout != 2*time.Second || s.ClientName != "x" || s.TLSConfig != nil || !s.ContextTimeoutEnabled {
			t.Fatalf("options = %+v", s)
		}
	})
	t.Run("rediss", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "rediss://redis.example.com/0"))
		if err != nil {
			t.Fatal(err)
		}
		s := o.standalone
		if s == nil || s.Addr != "redis.example.com:6379" || s.TLSConfig == nil || s.TLSConfig.ServerName != "redis.example.com" || s.TLSConfig.InsecureSkipVerify {
			t.Fatalf("options = %+v", s)
		}
		o, err = parseURL(mustParse(t, "rediss://redis.example.com/0?skip_verify=true"))
		if err != nil || !o.standalone.TLSConfig.InsecureSkipVerify {
			t.Fatalf("skip_verify=true: %v, %+v", err, o.standalone)
		}
	})
	t.Run("redis+unix", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "redis+unix://:pw@/run/redis/redis.sock?db=2"))
		if err != nil {
			t.Fatal(err)
		}
		s := o.standalone
		if s == nil || s.Network != "unix" || s.Addr != "/run/redis/redis.sock" || s.DB != 2 || s.Password != "pw" {
			t.Fatalf("options = %+v", s)
		}
	})
	t.Run("redis+sentinel", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "redis+sentinel://suser:spw@s1:26379/1?master_name=mymaster&addr=s2:26379&addr=s3:26379&username=app&password=mpw"))
		if err != nil {
			t.Fatal(err)
		}
		s := o.sentinel
		if s == nil || s.MasterName != "mymaster" || strings.Join(s.SentinelAddrs, ",") != "s1:26379,s2:26379,s3:26379" ||
			s.SentinelUsername != "suser" || s.SentinelPassword != "spw" || s.Username != "app" || s.Password != "mpw" ||
			s.DB != 1 || s.TLSConfig != nil || !s.ContextTimeoutEnabled {
			t.Fatalf("options = %+v", s)
		}
	})
	t.Run("rediss+sentinel", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "rediss+sentinel://s1:26379?master_name=m"))
		if err != nil || o.sentinel == nil || o.sentinel.TLSConfig == nil {
			t.Fatalf("%v, %+v", err, o.sentinel)
		}
	})
	t.Run("redis+cluster", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "redis+cluster://:pw@n1:7000?addr=n2:7000&addr=n3:7000&max_redirects=5"))
		if err != nil {
			t.Fatal(err)
		}
		c := o.cluster
		if c == nil || strings.Join(c.Addrs, ",") != "n1:7000,n2:7000,n3:7000" || c.Password != "pw" || c.MaxRedirects != 5 || c.TLSConfig != nil || !c.ContextTimeoutEnabled {
			t.Fatalf("options = %+v", c)
		}
	})
	t.Run("rediss+cluster", func(t *testing.T) {
		o, err := parseURL(mustParse(t, "rediss+cluster://n1:7000/"))
		if err != nil || o.cluster == nil || o.cluster.TLSConfig == nil {
			t.Fatalf("%v, %+v", err, o.cluster)
		}
	})
}

// Every parameter the driver lists as accepted must be accepted by the go-redis
// parser behind its form, so the list cannot drift from go-redis.
func TestAcceptedParamsParse(t *testing.T) {
	sample := func(name string) string {
		switch {
		case name == "addr":
			return "127.0.0.1:1"
		case name == "master_name" || name == "client_name" || name == "username" || name == "password" || name == "identitySuffix":
			return "x"
		case name == "protocol":
			return "2"
		case strings.Contains(name, "timeout") && name != "failing_timeout_seconds" || strings.Contains(name, "backoff") ||
			strings.Contains(name, "lifetime") || strings.Contains(name, "idle_time") || name == "max_conn_age":
			return "1s"
		case name == "pool_fifo" || name == "read_only" || name == "route_by_latency" || name == "route_randomly" ||
			name == "disableIdentity" || name == "unstable_resp3" || name == "skip_verify":
			return "true"
		default:
			return "1"
		}
	}
	for scheme, f := range forms {
		host := "h:1"
		if scheme == SchemeUnix {
			host = ""
		}
		for _, p := range f.params {
			raw := scheme + "://" + host + "/?" + p + "=" + sample(p)
			if f.topology == sentinel && p != "master_name" {
				raw += "&master_name=m"
			}
			if f.topology == cluster {
				raw = strings.Replace(raw, "/?", "?", 1)
			}
			if scheme == SchemeUnix {
				raw = strings.Replace(raw, "//?", "///tmp/r.sock?", 1)
			}
			if _, err := parseURL(mustParse(t, raw)); err != nil {
				t.Errorf("%s: %v", raw, err)
			}
		}
	}
}

func TestUnknownParameterListsTheAcceptedOnes(t *testing.T) {
	_, err := parseURL(mustParse(t, "redis://h:1/0?dial_timeout=1s&colour=blue"))
	if !errors.Is(err, driver.ErrInvalidURL) {
		t.Fatalf("err = %v, want ErrInvalidURL", err)
	}
	for _, want := range []string{"colour", "dial_timeout", "pool_size", "ttl, auto_refresh, prefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := parseURL(mustParse(t, "redis://h:1/0?skip_verify=true")); !errors.Is(err, driver.ErrInvalidURL) {
		t.Errorf("skip_verify without TLS: err = %v, want ErrInvalidURL", err)
	}
}

func TestBadURLsAreRefusedWithTheReason(t *testing.T) {
	for raw, want := range map[string]string{
		"redis+sentinel://s1:26379?replica_only=true&master_name=m":             "primary",
		"redis+sentinel://s1:26379?master_name=m&context_timeout_enabled=false": "context deadlines",
		"redis+sentinel://s1:26379":                                             "master_name",
		"redis+cluster://n1:7000/2":                                             "database 0",
		"redis+unix://localhost/run/redis.sock":                                 "no host",
		"redis://h:1/notanumber":                                                "database number",
		"redis://h:1/0/1":                                                       "path",
		"redis+cluster://n1:7000?addr=nocolon":                                  "addr",
		"memcached://h:1":                                                       "redis+cluster",
	} {
		_, err := parseURL(mustParse(t, raw))
		if !errors.Is(err, driver.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalidURL mentioning %q", raw, err, want)
		}
	}
}

// A password never appears in an error or in the Locker's String, whether the
// URL is refused by the parser or by the server.
func TestPasswordsNeverAppearInErrors(t *testing.T) {
	const secret = "pa55-w0rd-never-shown"
	srv := passwordServer(t, "the-right-one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, raw := range []string{
		"redis://:" + secret + "@" + srv.Addr() + "/0",                                   // wrong password
		"redis://user:" + secret + "@" + srv.Addr() + "/0",                               // wrong user and password
		"redis://:" + secret + "@" + srv.Addr() + "/notadb",                              // refused by go-redis
		"redis://:" + secret + "@" + srv.Addr() + "/0?colour=blue",                       // unknown parameter
		"redis://:" + secret + "@127.0.0.1:notaport/0",                                   // refused by url.Parse
		"redis+sentinel://127.0.0.1:1?master_name=m&password=" + secret + "&pool_size=x", // secret in the query
		"rediss://:" + secret + "@" + srv.Addr() + "/0?dial_timeout=1s",                  // TLS to a plain server
	} {
		octx, ocancel := context.WithTimeout(ctx, 2*time.Second) // a TLS handshake with a plain server hangs
		lk, err := lock.Open(octx, raw)
		ocancel()
		if err == nil {
			_ = lk.Close()
			t.Errorf("Open succeeded for %q", strings.ReplaceAll(raw, secret, "xxxxx"))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
	}

	// The right password works, and String does not show it.
	lk, err := lock.Open(ctx, "redis://:the-right-one@"+srv.Addr()+"/0")
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	defer lk.Close()
	if strings.Contains(lk.String(), "the-right-one") {
		t.Errorf("String() = %q shows the password", lk.String())
	}
	l, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

func TestWrongPasswordFailsOpen(t *testing.T) {
	srv := passwordServer(t, "the-right-one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := lock.Open(ctx, "redis://:wrong@"+srv.Addr()+"/0")
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Open with a wrong password = %v, want the server's WRONGPASS", err)
	}
}

// passwordServer starts a private server that requires password. It sets the
// password after the start, because testserver's readiness probe sends an
// unauthenticated PING.
func passwordServer(t *testing.T, password string) *testserver.Server {
	t.Helper()
	srv := testserver.StartRedis(t)
	if err := adminClient(t, srv.URL()).ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// Redaction is one pass: a short password is replaced once, and the message
// stays readable.
func TestRedactReplacesEachPasswordOnce(t *testing.T) {
	u := mustParse(t, "redis://:x@h:1/0")
	err := redact(errors.New("context deadline exceeded on x"), u)
	if got, want := err.Error(), "contexxxxxt deadline exxxxxceeded on xxxxx"; got != want {
		t.Errorf("redact = %q, want %q", got, want)
	}
}

func TestRedactRemovesPasswordsFromMessages(t *testing.T) {
	u := mustParse(t, "redis+sentinel://u:p%40ss@h:1?master_name=m&password=q-secret")
	cause := errors.New("boom")
	err := redact(errors.Join(cause, errors.New("saw p@ss and p%40ss and q-secret")), u)
	for _, s := range []string{"p@ss", "p%40ss", "q-secret"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%q still in %q", s, err)
		}
	}
	if !errors.Is(err, cause) {
		t.Error("redacted error lost its cause")
	}
}

// No URL makes the parser show the password, however malformed the rest.
func FuzzParseURLNeverShowsThePassword(f *testing.F) {
	const marker = "Zq7-marker-pw"
	for _, s := range []string{
		"redis://:%s@h:1/0", "rediss://u:%s@h/0?skip_verify=maybe", "redis+unix://:%s@/tmp/r.sock?db=x",
		"redis+sentinel://:%s@h:1?master_name=m&addr=%%zz", "redis+sentinel://h:1?master_name=m&password=%s&db=q",
		"redis+cluster://:%s@h:1/0?addr=[::1", "redis://:%s@h:99999/0", "redis://:%s@[::1]:1/0?pool_size=-",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		raw := strings.ReplaceAll(tmpl, "%s", marker)
		if !strings.Contains(raw, marker) {
			raw = "redis://:" + marker + "@" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return // lock.Open refuses it before the driver sees it
		}
		if p, _ := u.User.Password(); p != marker && u.Query().Get("password") != marker {
			return // the marker is not a password in this URL
		}
		if _, err := parseURL(u); err != nil && strings.Contains(err.Error(), marker) {
			t.Fatalf("parseURL(%q) = %v shows the password", raw, err)
		}
	})
}
