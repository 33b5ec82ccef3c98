package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/lock"
)

// forwarded are the signals distlock passes on to the command (and that end a
// wait for the lock).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// releaseTimeout bounds the release after the command exits; a lock that cannot
// be released then ends with distlock's session or expires.
const releaseTimeout = 10 * time.Second

// runConfig is a parsed "distlock run" command line.
type runConfig struct {
	url       string
	ttl       time.Duration // 0: the URL's ttl parameter, else lock.DefaultTTL
	wait      time.Duration // 0: wait as long as it takes
	noWait    bool
	grace     time.Duration // 0 with graceSet false: the default, see effectiveGrace
	verbose   bool
	graceSet  bool
	logLevel  string // --log-level: debug, info, warn, error, off
	logFormat string // --log-format: text, json
	shared    bool   // --shared: a read lock, held beside other --shared runs
	// --signal-child-only: signal the command alone, not its process group
	signalChildOnly bool
	permits         int      // --permits N: one of N permits of a semaphore; 0: not given
	key             string   // the key (run) or election name (elect); keys[0] for a set
	keys            []string // run: every key, as given (several: taken together)
	argv            []string

	// elect only
	elect bool   // "distlock elect": key is an election's name
	value string // --value: published with the leadership
	once  bool   // --once: do not campaign again after a loss
}

// parseRun parses the arguments of "distlock run", or of "distlock elect"
// when elect is set. It returns ok false with the exit status when distlock
// must stop (bad usage, or help was asked for).
func parseRun(args []string, stdout, stderr io.Writer, elect bool) (cfg runConfig, status int, ok bool) {
	cfg.elect = elect
	name := "distlock run"
	if elect {
		name = "distlock elect"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "backend URL")
	fs.DurationVar(&cfg.ttl, "ttl", 0, "lock TTL")
	fs.DurationVar(&cfg.grace, "grace", 0, "time between SIGTERM and SIGKILL after a lost lock")
	fs.BoolVar(&cfg.verbose, "verbose", false, "report on stderr")
	fs.StringVar(&cfg.logLevel, "log-level", defaultLogLevel, "log the lock's life on stderr from this level: debug, info, warn, error, off")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&cfg.signalChildOnly, "signal-child-only", false, "signal the command alone, not its process group")
	if elect {
		fs.StringVar(&cfg.value, "value", "", "value published with the leadership")
		fs.BoolVar(&cfg.once, "once", false, "do not campaign again after losing the leadership")
	} else {
		fs.DurationVar(&cfg.wait, "wait", 0, "give up after this long")
		fs.BoolVar(&cfg.noWait, "no-wait", false, "make one attempt")
		fs.BoolVar(&cfg.shared, "shared", false, "take a shared (read) lock")
		fs.IntVar(&cfg.permits, "permits", 0, "take one of N permits of a semaphore")
		fs.Func("key", "a key to hold (repeatable; then every argument is CMD)", func(k string) error {
			cfg.keys = append(cfg.keys, k)
			return nil
		})
	}
	if status, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return cfg, status, false
	}
	waitSet, ttlSet, permitsSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		waitSet = waitSet || f.Name == "wait"
		ttlSet = ttlSet || f.Name == "ttl"
		permitsSet = permitsSet || f.Name == "permits"
		cfg.graceSet = cfg.graceSet || f.Name == "grace"
	})
	bad := func(format string, a ...any) (runConfig, int, bool) {
		return cfg, usageError(stderr, "distlock", format, a...), false
	}
	if err := checkLogFlags(cfg.logLevel, cfg.logFormat); err != nil {
		return bad("%v", err)
	}
	switch {
	case waitSet && cfg.noWait:
		return bad("--wait and --no-wait exclude each other")
	case waitSet && cfg.wait <= 0:
		return bad("--wait %v: want a positive duration (or --no-wait)", cfg.wait)
	case ttlSet && cfg.ttl <= 0:
		return bad("--ttl %v: want a positive duration", cfg.ttl)
	case cfg.grace < 0:
		return bad("--grace %v: want a duration of at least 0", cfg.grace)
	case permitsSet && cfg.permits < 1:
		return bad("--permits %d: want at least 1", cfg.permits)
	case permitsSet && cfg.shared:
		return bad("--shared and --permits exclude each other: a key is either a read-write lock or a semaphore")
	}
	rest := fs.Args()
	switch {
	case len(cfg.keys) > 0: // --key: every argument is CMD
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
	case len(rest) == 0 && elect:
		return bad("missing NAME and CMD")
	case len(rest) == 0:
		return bad("missing KEY and CMD")
	default:
		cfg.keys, rest = splitKeys(rest, elect)
	}
	cfg.key = cfg.keys[0]
	if len(rest) == 0 {
		return bad("missing CMD to run while holding %s", quoteKeys(cfg.keys))
	}
	if len(cfg.keys) > 1 {
		for _, k := range cfg.keys {
			if strings.ContainsAny(k, "\n\x00") {
				return bad("key %q: a key of a set must not contain a newline, which separates the keys in DISTLOCK_KEYS", k)
			}
		}
	}
	cfg.argv = rest
	if cfg.url == "" {
		cfg.url = defaultURL()
	}
	return cfg, 0, true
}

// splitKeys splits run's arguments into its keys and CMD: the arguments before
// the first "--" are keys when there are several of them ("KEY1 KEY2 -- CMD");
// otherwise the first argument is the one key (or elect's name) and the rest,
// after an optional "--", is CMD, as it always was.
func splitKeys(args []string, elect bool) (keys, cmd []string) {
	if i := slices.Index(args, "--"); i > 1 && !elect {
		return args[:i], args[i+1:]
	}
	keys, cmd = args[:1], args[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	return keys, cmd
}

// quoteKeys names keys in messages: "a", or "a", "b" for a set.
func quoteKeys(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}

// defaultURL is $DISTLOCK_URL, else a lock directory under the OS temp directory,
// which needs no setup and coordinates the processes of this host.
func defaultURL() string {
	if u := os.Getenv("DISTLOCK_URL"); u != "" {
		return u
	}
	dir := filepath.Join(os.TempDir(), "distlock")
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

// run is "distlock run": it returns the exit status.
func run(args []string, stdout, stderr io.Writer, elect bool) int {
	cfg, status, ok := parseRun(args, stdout, stderr, elect)
	if !ok {
		return status
	}
	// From here on the forwarded signals are ours to handle: while waiting they
	// end the wait, while the command runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	r := &runner{cfg: cfg, stderr: stderr, sigs: sigs}
	return r.run()
}

type runner struct {
	cfg    runConfig
	stderr io.Writer
	sigs   chan os.Signal
	locker *lock.Locker

	ttl      time.Duration // the lock's TTL: --ttl, else the URL's ttl, else lock.DefaultTTL
	expiring bool          // the backend frees the lock TTL after the last refresh it saw
	grace    time.Duration // --grace, or its default
}

// defaultGrace is --grace when not given, shortened on expiring backends to
// a third of the TTL (see checkGrace).
const defaultGrace = 10 * time.Second

// effectiveTTL is the TTL the lock is taken with: --ttl, else the URL's ttl
// parameter (lock.Open has already checked it), else lock.DefaultTTL. distlock
// needs it to settle --grace, which must fit in it on expiring backends.
func effectiveTTL(cfg runConfig) time.Duration {
	if cfg.ttl > 0 {
		return cfg.ttl
	}
	if u, err := url.Parse(cfg.url); err == nil {
		if v, ok := u.Query()["ttl"]; ok {
			if d, err := time.ParseDuration(v[0]); err == nil && d > 0 {
				return d
			}
		}
	}
	return lock.DefaultTTL
}

// checkGrace settles --grace. On a session-bound backend (file, PostgreSQL,
// ZooKeeper) the server keeps the lock while distlock's session lives, so any
// grace is safe: distlock releases only once the command is gone. On an expiring
// backend (Redis, Redlock, etcd) the server frees the lock TTL after the last
// refresh it saw, whatever distlock does, so distlock must start stopping the
// command --grace before that: the lock is taken with lock.WithGrace, so Lost
// closes once TTL − drift − grace has passed since the last confirmed refresh.
// That window must leave room for refreshes, so --grace must be shorter than
// half the TTL there (WithGrace's own rule); a longer one is bad usage rather
// than a promise distlock could not keep.
func (r *runner) checkGrace() (status int, ok bool) {
	r.grace = r.cfg.grace
	if !r.cfg.graceSet {
		r.grace = defaultGrace
		if r.expiring {
			r.grace = min(defaultGrace, r.ttl/3)
		}
	}
	if r.expiring && r.grace >= r.ttl/2 {
		return usageError(r.stderr, "distlock", "--grace %v must be shorter than half the TTL (%v) on %s, whose locks expire: the command must be stopped before the backend can give the lock to another holder",
			r.grace, r.ttl, r.locker), false
	}
	return 0, true
}

func (r *runner) errorf(format string, a ...any) {
	fmt.Fprintf(r.stderr, "distlock: "+format+"\n", a...)
}

func (r *runner) verbosef(format string, a ...any) {
	if r.cfg.verbose {
		r.errorf(format, a...)
	}
}

func (r *runner) run() int {
	var opts []lock.Option
	if l := newLogger(r.stderr, r.cfg.logLevel, r.cfg.logFormat); l != nil {
		opts = append(opts, lock.WithLogger(l))
	}
	locker, err := lock.Open(context.Background(), r.cfg.url, opts...)
	if err != nil {
		// lock's errors never carry a password
		if errors.Is(err, lock.ErrInvalidURL) || errors.Is(err, lock.ErrUnknownScheme) || errors.Is(err, lock.ErrInvalidArgument) {
			return usageError(r.stderr, "distlock", "%v", err)
		}
		r.errorf("%v", err)
		return exitUnavailable
	}
	// The lock is released (after the command is gone) before Close, which would
	// otherwise release it first.
	defer locker.Close()
	r.locker = locker
	r.ttl = effectiveTTL(r.cfg)
	r.expiring = locker.Capabilities().Expiring
	if status, ok := r.checkGrace(); !ok {
		return status
	}
	if r.cfg.elect {
		return r.lead()
	}
	h, env, status := r.acquire()
	if h == nil {
		return status
	}
	return r.runHolding(h, env)
}

// acquire takes the lock (or, for several keys, every one of them together)
// as the flags say, and returns it with CMD's environment, or nil and the exit
// status.
func (r *runner) acquire() (holding, []string, int) {
	ctx, cancel := context.WithCancel(context.Background())
	if r.cfg.wait > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), r.cfg.wait)
	}
	defer cancel()
	type result struct {
		h   holding
		env []string
		err error
	}
	// The TTL is a per-call option, so --ttl wins over the URL's ttl parameter,
	// which sets the Locker's default.
	opts := []lock.AcquireOption{lock.WithTTL(r.ttl)}
	if r.cfg.shared {
		opts = append(opts, lock.WithShared(true))
	}
	if r.cfg.permits > 0 {
		opts = append(opts, lock.WithPermits(r.cfg.permits))
	}
	if r.expiring {
		// Lost closes --grace before the backend could free the lock, so the
		// command is gone (killed if need be) before anyone else can hold it.
		opts = append(opts, lock.WithGrace(r.grace))
	}
	done := make(chan result, 1)
	go func() {
		h, env, err := r.take(ctx, true, opts)
		if errors.Is(err, lock.ErrLocked) && !r.cfg.noWait {
			r.verbosef("waiting for the %s %s on %s", r.what(), quoteKeys(r.cfg.keys), r.locker)
			h, env, err = r.take(ctx, false, opts)
		}
		done <- result{h, env, err}
	}()
	var res result
	select {
	case res = <-done:
	case s := <-r.sigs:
		cancel()
		if res = <-done; res.err == nil {
			r.release(res.h)
		}
		r.errorf("%v while waiting for the %s %s", s, r.what(), quoteKeys(r.cfg.keys))
		return nil, nil, exitSignalBase + signum(s)
	}
	err := res.err
	switch {
	case err == nil:
		return res.h, res.env, 0
	case errors.Is(err, lock.ErrLocked):
		r.errorf("the lock %q is held elsewhere (%s)", blockingKey(err, r.cfg.key), r.locker)
		return nil, nil, exitHeld
	case errors.Is(err, context.DeadlineExceeded):
		r.errorf("the lock %q is still held elsewhere after --wait %v (%s)", blockingKey(err, r.cfg.key), r.cfg.wait, r.locker)
		return nil, nil, exitHeld
	case errors.Is(err, lock.ErrInvalidKey), errors.Is(err, lock.ErrInvalidArgument), errors.Is(err, lock.ErrUnsupported):
		return nil, nil, usageError(r.stderr, "distlock", "%v", err)
	default:
		r.errorf("%v", err)
		return nil, nil, exitUnavailable
	}
}

// take makes one TryAcquire (try) or one Acquire of the key, or of every key
// of a set together (AcquireAll: all or nothing, in one order whatever order
// they were named in, so two runs naming the same keys cannot deadlock).
func (r *runner) take(ctx context.Context, try bool, opts []lock.AcquireOption) (holding, []string, error) {
	if len(r.cfg.keys) == 1 {
		get := r.locker.Acquire
		if try {
			get = r.locker.TryAcquire
		}
		l, err := get(ctx, r.cfg.key, opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, r.env(l.Token), nil
	}
	get := r.locker.AcquireAll
	if try {
		get = r.locker.TryAcquireAll
	}
	s, err := get(ctx, r.cfg.keys, opts...)
	if err != nil {
		return nil, nil, err
	}
	keys := s.Keys()
	env := append(r.baseEnv(), "DISTLOCK_KEYS="+strings.Join(keys, "\n"))
	if r.locker.Capabilities().Fencing {
		tokens := make([]string, len(keys))
		for i, k := range keys {
			tokens[i] = strconv.FormatUint(s.Lock(k).Token(), 10)
		}
		env = append(env, "DISTLOCK_TOKENS="+strings.Join(tokens, " "))
		r.verbosef("holding the locks %s on %s, tokens %s", quoteKeys(keys), r.locker, strings.Join(tokens, " "))
	} else {
		r.verbosef("holding the locks %s on %s (no fencing tokens on this backend)", quoteKeys(keys), r.locker)
	}
	return s, env, nil
}

// blockingKey is the key an acquire's error names (for a set, the member that
// stopped it), else key.
func blockingKey(err error, key string) string {
	var le *lock.Error
	if errors.As(err, &le) && le.Key != "" {
		return le.Key
	}
	return key
}

// release gives the lock up after the command, and returns the error. Where
// locks expire, trying for longer than the TTL is pointless: the lock is gone by
// then anyway.
func (r *runner) release(l holding) error {
	timeout := releaseTimeout
	if r.expiring {
		timeout = min(timeout, r.ttl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := l.Release(ctx)
	if err == nil {
		r.verbosef("released the %s %s", r.what(), quoteKeys(r.cfg.keys))
	}
	return err
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
