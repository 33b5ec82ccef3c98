package zkdriver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	"github.com/distlock/lock/zkdriver"
)

// These tests run Apache Curator itself (testdata/curator/Interop.java, on
// Debian's libcurator-recipes-java, which scripts/install-backends installs)
// against the test's ZooKeeper, beside the driver on the same paths: the
// layouts are Curator's, so each excludes the other.

// curatorJars is where Debian installs Curator; the jars' manifests name
// their dependencies (framework, client, ZooKeeper, Guava, SLF4J).
var curatorJars = []string{
	"/usr/share/java/curator-recipes.jar",
	"/usr/share/java/curator-framework.jar",
	"/usr/share/java/slf4j-nop.jar",
}

// curator is a running Interop program.
type curator struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan javaLine
	open  atomic.Bool // set by the test once the driver's hold is given up
}

// javaLine is a line Interop wrote, with whether the test had given up the
// driver's hold when it arrived.
type javaLine struct {
	text  string
	after bool
}

// startCurator compiles and starts Interop against the ZooKeeper of base (a
// zk:// URL); it skips the test (fails it under DISTLOCK_TEST_REQUIRE=1) when
// Java or Curator is not installed.
func startCurator(t *testing.T, base string) *curator {
	t.Helper()
	var missing []string
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, jar := range curatorJars {
		if _, err := os.Stat(jar); err != nil {
			missing = append(missing, jar)
		}
	}
	if len(missing) > 0 {
		msg := "Curator interop needs a JDK and Debian's libcurator-recipes-java (scripts/install-backends installs them); missing: " + strings.Join(missing, ", ")
		if os.Getenv(testserver.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	classes := t.TempDir()
	cp := strings.Join(curatorJars, string(os.PathListSeparator))
	if out, err := exec.Command("javac", "-d", classes, "-cp", cp, filepath.Join("testdata", "curator", "Interop.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	cmd := exec.Command("java", "-cp", classes+string(os.PathListSeparator)+cp, "Interop", u.Host)
	cmd.Env = append(os.Environ(), "JAVA_TOOL_OPTIONS=") // not the server's options
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &curator{t: t, stdin: stdin, lines: make(chan javaLine, 64)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- javaLine{sc.Text(), c.open.Load()}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // Interop ends at the end of its input
		done := make(chan struct{})
		go func() {
			for range c.lines {
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		wg.Wait()
		if err := cmd.Wait(); err != nil && !t.Failed() {
			t.Errorf("Curator program: %v\n%s", err, stderr.String())
		}
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("Curator program's stderr:\n%s", stderr.String())
		}
	})
	c.expect("ready")
	return c
}

// send writes a command line to Interop.
func (c *curator) send(format string, args ...any) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.stdin, format+"\n", args...); err != nil {
		c.t.Fatal(err)
	}
}

// expect waits for Interop's next line, which must be want, and returns it.
func (c *curator) expect(want string) javaLine {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("Curator program ended; want %q", want)
		}
		if l.text != want {
			c.t.Fatalf("Curator program said %q, want %q", l.text, want)
		}
		return l
	case <-time.After(time.Minute):
		c.t.Fatalf("Curator program did not say %q within a minute", want)
	}
	return javaLine{}
}

// quiet fails the test if Interop has said something the test did not
// expect yet (a hold it should not have).
func (c *curator) quiet() {
	c.t.Helper()
	select {
	case l := <-c.lines:
		c.t.Fatalf("Curator program said %q too early", l.text)
	default:
	}
}

// A Curator InterProcessReadWriteLock's write lock and the driver's shared
// locks on LockPath(key) exclude each other, both ways, Curator's readers
// share with the driver's, and a Curator writer waiting behind a driver
// reader holds back the driver's later readers (writer preference across the
// two clients). With exclusive=write, the driver's exclusive locks exclude
// Curator's readers too.
func TestCuratorReadWriteLockAndDriverExcludeEachOther(t *testing.T) {
	base := testserver.ZooKeeper(t)
	c := startCurator(t, base)
	u := base + "?prefix=" + zkdriver.EscapeName(t.Name())
	lk, d := mustOpen(t, u)
	conn := zkConn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shared := lock.WithShared(true)

	t.Run("CuratorWriterHoldsDriverReaderWaits", func(t *testing.T) {
		c.t = t
		path := d.LockPath("rw1")
		c.send("acquire w1 write %s", path)
		c.expect("held w1")
		if _, err := lk.TryAcquire(ctx, "rw1", shared); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("driver's shared TryAcquire while Curator's write lock is held = %v, want ErrLocked", err)
		}
		var released atomic.Bool
		got := make(chan error, 1)
		go func() {
			l, err := lk.Acquire(ctx, "rw1", shared)
			if err == nil && !released.Load() {
				err = errors.New("driver's reader acquired while Curator's write lock was held")
			}
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitUntil(t, 10*time.Second, "the driver's reader queued", func() bool {
			return len(children(t, conn, path)) == 2
		})
		released.Store(true)
		c.send("release w1")
		c.expect("released w1")
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DriverReaderHoldsCuratorWriterWaitsAndHoldsBackLaterReaders", func(t *testing.T) {
		c.t = t
		path := d.LockPath("rw2")
		r, err := lk.Acquire(ctx, "rw2", shared)
		if err != nil {
			t.Fatal(err)
		}
		c.send("try w0 write %s", path)
		c.expect("busy w0")
		c.send("acquire w2 write %s", path)
		waitUntil(t, 10*time.Second, "Curator's writer queued", func() bool {
			return len(children(t, conn, path)) == 2
		})
		// A reader that comes after the waiting writer waits behind it.
		if _, err := lk.TryAcquire(ctx, "rw2", shared); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("driver's shared TryAcquire behind Curator's waiting writer = %v, want ErrLocked", err)
		}
		c.quiet()
		c.open.Store(true)
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l := c.expect("held w2"); !l.after {
			t.Fatal("Curator's write lock was held before the driver's reader released")
		}
		c.open.Store(false)
		if _, err := lk.TryAcquire(ctx, "rw2"); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("driver's exclusive TryAcquire while Curator's write lock is held = %v, want ErrLocked", err)
		}
		c.send("release w2")
		c.expect("released w2")
	})

	t.Run("CuratorAndDriverReadersShare", func(t *testing.T) {
		c.t = t
		path := d.LockPath("rw3")
		c.send("acquire r1 read %s", path)
		c.expect("held r1")
		l, err := lk.TryAcquire(ctx, "rw3", shared)
		if err != nil {
			t.Fatalf("driver's shared TryAcquire beside Curator's reader: %v", err)
		}
		c.send("try r2 read %s", path)
		c.expect("held r2")
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		c.send("release r1")
		c.expect("released r1")
		c.send("release r2")
		c.expect("released r2")
	})

	t.Run("WriteNodesExcludeCuratorReaders", func(t *testing.T) {
		c.t = t
		wlk, wd := mustOpen(t, u+"&exclusive=write")
		path := wd.LockPath("rw4")
		l, err := wlk.Acquire(ctx, "rw4")
		if err != nil {
			t.Fatal(err)
		}
		if kids := children(t, conn, path); len(kids) != 1 || !strings.Contains(kids[0], "__WRIT__") {
			t.Fatalf("exclusive=write made %q, want one __WRIT__ node", kids)
		}
		c.send("try r3 read %s", path)
		c.expect("busy r3")
		c.send("acquire r4 read %s", path)
		waitUntil(t, 10*time.Second, "Curator's reader queued", func() bool {
			return len(children(t, conn, path)) == 2
		})
		c.quiet()
		c.open.Store(true)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l := c.expect("held r4"); !l.after {
			t.Fatal("Curator's read lock was held before the driver's write lock was released")
		}
		c.open.Store(false)
		if _, err := wlk.TryAcquire(ctx, "rw4"); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("driver's exclusive TryAcquire while Curator's reader holds = %v, want ErrLocked", err)
		}
		c.send("release r4")
		c.expect("released r4")
	})
}

// Curator's InterProcessSemaphoreV2 leases and the driver's permits on
// LockPath(key) count against one another: with n = 3, two Curator leases
// leave one permit, the driver takes it, both sides are then refused, and a
// waiter on either side gets the permit the other side frees.
func TestCuratorSemaphoreLeasesCountAgainstDriverPermits(t *testing.T) {
	base := testserver.ZooKeeper(t)
	c := startCurator(t, base)
	lk, d := mustOpen(t, base+"?prefix="+zkdriver.EscapeName(t.Name()))
	conn := zkConn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3
	permits := lock.WithPermits(n)
	path := d.LockPath("pool")
	leases := func() int { return len(children(t, conn, path+"/leases")) }

	c.send("acquire l1 lease %s %d", path, n)
	c.expect("held l1")
	c.send("acquire l2 lease %s %d", path, n)
	c.expect("held l2")
	mine, err := lk.TryAcquire(ctx, "pool", permits)
	if err != nil {
		t.Fatalf("driver's TryAcquire beside two of three Curator leases: %v", err)
	}
	if _, err := lk.TryAcquire(ctx, "pool", permits); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("driver's TryAcquire with all three permits taken = %v, want ErrLocked", err)
	}
	c.send("try l3 lease %s %d", path, n)
	c.expect("busy l3")

	// A Curator waiter gets the permit the driver frees.
	c.send("acquire l4 lease %s %d", path, n)
	waitUntil(t, 10*time.Second, "Curator's waiter made its lease", func() bool { return leases() == n+1 })
	c.quiet()
	c.open.Store(true)
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := c.expect("held l4"); !l.after {
		t.Fatal("Curator's fourth lease was held before the driver freed its permit")
	}

	// And a driver waiter the permit Curator frees.
	var freed atomic.Bool
	got := make(chan error, 1)
	go func() {
		l, err := lk.Acquire(ctx, "pool", permits)
		if err == nil && !freed.Load() {
			err = errors.New("driver's permit granted while Curator held all three leases")
		}
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitUntil(t, 10*time.Second, "the driver's waiter made its lease", func() bool { return leases() == n+1 })
	freed.Store(true)
	c.send("release l1")
	c.expect("released l1")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"l2", "l4"} {
		c.send("release %s", id)
		c.expect("released " + id)
	}
	if kids := children(t, conn, path+"/leases"); len(kids) != 0 {
		t.Fatalf("leases left: %q", kids)
	}
}
