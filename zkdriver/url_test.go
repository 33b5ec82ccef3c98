package zkdriver_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

func TestURLFormsAreParsed(t *testing.T) {
	cases := []struct {
		url     string
		servers []string
		chroot  string
		timeout time.Duration
	}{
		{"zk://127.0.0.1:2181", []string{"127.0.0.1:2181"}, "", zkdriver.DefaultSessionTimeout},
		{"zk://zk1", []string{"zk1:2181"}, "", zkdriver.DefaultSessionTimeout},
		{"zk://zk1:2181,zk2:2182,zk3:2183/", []string{"zk1:2181", "zk2:2182", "zk3:2183"}, "", zkdriver.DefaultSessionTimeout},
		{"zk://zk1,zk2,zk3", []string{"zk1:2181", "zk2:2181", "zk3:2181"}, "", zkdriver.DefaultSessionTimeout},
		{"zk://zk1:2181/services/billing?session_timeout=30s", []string{"zk1:2181"}, "/services/billing", 30 * time.Second},
		{"zk://u:p@zk1:2181/app?connect_timeout=2s", []string{"zk1:2181"}, "/app", zkdriver.DefaultSessionTimeout},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := zkdriver.ParseURL(u)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(got.Servers(), c.servers) || got.Chroot() != c.chroot || got.SessionTimeout() != c.timeout {
			t.Errorf("%s: servers %v chroot %q timeout %v; want %v %q %v", c.url, got.Servers(), got.Chroot(), got.SessionTimeout(), c.servers, c.chroot, c.timeout)
		}
	}
}

func TestBadURLsAreRejectedWithoutTheirPassword(t *testing.T) {
	const secret = "s3cr3t-pw"
	cases := map[string]string{
		"zk://u:" + secret + "@h:2181?sessiontimeout=1s":         "accepted: session_timeout, connect_timeout",
		"zk://u:" + secret + "@h:2181?session_timeout=ten":       "session_timeout",
		"zk://u:" + secret + "@h:2181?session_timeout=0s":        "session_timeout",
		"zk://u:" + secret + "@h:2181?connect_timeout=-1s":       "connect_timeout",
		"zk://u:" + secret + "@h:2181,,h2:2181":                  "empty server",
		"zk://u:" + secret + "@h:notaport":                       "",
		"zk://u:" + secret + "@h:2181/a//b":                      "chroot",
		"zk://u:" + secret + "@h:2181/a/../b":                    "chroot",
		"zk://u:" + secret + "@h:2181/a/":                        "chroot",
		"zk://u:" + secret + "@h:2181/a%01b":                     "chroot",
		"zk://:" + secret + "@h:2181":                            "user and a password",
		"zk://u@h:2181":                                          "user and a password",
		"zk://u:" + secret + "@h:2181#frag":                      "fragment",
		"zk://u:" + secret + "@h:2181?exclusive=writer":          "exclusive",
		"zk://u:" + secret + "@":                                 "want zk://host",
		"zk://u:" + secret + "@h:2181/%zz":                       "", // url.Parse fails: the portable layer redacts
		"zk://u:" + strings.ReplaceAll(secret, "-", "%zz") + "@": "",
	}
	for raw, want := range cases {
		lk, err := lock.Open(context.Background(), raw)
		if err == nil {
			lk.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, lock.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", raw, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want it to mention %q", raw, err, want)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%q) error contains the password: %v", raw, err)
		}
	}
}

// Digest credentials from the URL authenticate the session and put a digest
// ACL on every node the driver makes: a client without them can neither
// delete a held lock node nor queue behind it.
func TestDigestCredentialsProtectTheLockNodes(t *testing.T) {
	base := testserver.ZooKeeper(t)
	const pw = "correct-horse"
	host := strings.TrimPrefix(base, "zk://")
	good := "zk://locker:" + pw + "@" + host + "/digest?prefix=" + t.Name()
	lk, err := lock.Open(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if strings.Contains(lk.String(), pw) {
		t.Errorf("String() = %q contains the password", lk.String())
	}
	l, err := lk.Acquire(context.Background(), "invoice:42")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	d, err := zkdriver.New(zkConn(t, base), zkdriver.WithChroot("/digest"), zkdriver.WithPrefix(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	anon, authed := zkConn(t, base), zkConn(t, base)
	if err := authed.AddAuth("digest", []byte("locker:"+pw)); err != nil {
		t.Fatal(err)
	}
	parent := d.LockPath("invoice:42")
	acl, _, err := authed.GetACL(parent)
	if err != nil {
		t.Fatal(err)
	}
	if want := zk.DigestACL(zk.PermAll, "locker", pw); !reflect.DeepEqual(acl, want) {
		t.Errorf("ACL of %s = %v, want %v", parent, acl, want)
	}
	if _, err := anon.Create(parent+"/x", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("unauthenticated create under the key node = %v, want ErrNoAuth", err)
	}
	nodes := children(t, authed, parent)
	if len(nodes) != 1 {
		t.Fatalf("lock nodes under %s: %v, want one", parent, nodes)
	}
	if err := anon.Delete(parent+"/"+nodes[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("unauthenticated delete of the holder's node = %v, want ErrNoAuth", err)
	}
}

// ZooKeeper takes any digest password (a wrong one is just another identity)
// and refuses it only where a node's ACL is checked. Open checks access under
// its root, so a wrong password, or none where the nodes need one, fails Open
// at once with a permanent error that names the user but not the password,
// instead of the first Acquire. The holder's lock is not disturbed.
func TestWrongCredentialsFailOpenWithoutShowingThePassword(t *testing.T) {
	base := testserver.ZooKeeper(t)
	const pw = "correct-horse"
	host := strings.TrimPrefix(base, "zk://")
	good := "zk://locker:" + pw + "@" + host + "/digest?prefix=" + t.Name()
	lk, err := lock.Open(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Acquire(context.Background(), "invoice:42")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	for name, url := range map[string]string{
		"WrongPassword": strings.Replace(good, pw, "wrong-password", 1),
		"NoCredentials": strings.Replace(good, "locker:"+pw+"@", "", 1),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			lk2, err := lock.Open(ctx, url)
			if err == nil {
				lk2.Close()
				t.Fatal("Open succeeded; want it to fail for lack of access")
			}
			t.Logf("Open failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, zk.ErrNoAuth) || !errors.Is(err, lock.ErrBackend) || errors.Is(err, lock.ErrUnavailable) {
				t.Errorf("Open = %v, want a permanent error (ErrBackend) matching zk.ErrNoAuth", err)
			}
			if !strings.Contains(err.Error(), "may not lock") {
				t.Errorf("Open = %v, want it to say that the session may not lock", err)
			}
			if strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), pw) {
				t.Errorf("error contains a password: %v", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Open took %v to fail; want it at once, not at a timeout", took)
			}
		})
	}
	if err := l.Refresh(context.Background()); err != nil {
		t.Errorf("holder's Refresh after the attempts: %v", err)
	}
}

// Open against a port where no server listens fails at once (the refusal is
// an answer; connect_timeout is for servers that do not answer) with an error
// that names the servers and the refusal but not the password, and leaves no
// goroutine behind (TestMain checks).
func TestOpenWithoutAServerFailsCleanly(t *testing.T) {
	const pw = "pw-that-must-not-show"
	start := time.Now()
	_, err := lock.Open(context.Background(), "zk://u:"+pw+"@127.0.0.1:1/app?connect_timeout=5s")
	if err == nil {
		t.Fatal("Open without a server succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Open took %v with connect_timeout=5s; want under 1s, at the refusal", took)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") || !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("error %q does not say which servers, nor match ECONNREFUSED and ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error contains the password: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer safe for the logger's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// go-zookeeper logs every connection, reconnection and failure to the standard
// logger unless told otherwise; a Driver from Open tells it to be quiet, so a
// program's log (and a password in it) stays its own.
func TestGoZookeeperLogsNothingToTheStandardLogger(t *testing.T) {
	var out lockedBuffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)

	p, _, prefix := faultSetup(t)
	lk, err := lock.Open(context.Background(), "zk://user:pw-secret@"+strings.TrimPrefix(p.URL(prefix), "zk://"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	p.Cut() // go-zookeeper reconnects, which it would log
	refreshOnceReconnected(t, l, 20*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); s != "" {
		t.Errorf("the standard logger got:\n%s", s)
	}
}
