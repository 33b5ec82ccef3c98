// Command distlock runs a command while holding a distributed lock, like flock(1)
// or etcdctl lock, on any distlock backend.
//
//	distlock run [--url URL] [--ttl D] [--wait D | --no-wait] [--grace D] [--shared | --permits N] [--signal-child-only] [--verbose] [--log-level L] [--log-format F] KEY [--] CMD [ARGS...]
//	distlock run [flags] KEY1 KEY2 ... -- CMD [ARGS...]
//	distlock elect [--url URL] [--ttl D] [--grace D] [--value V] [--once] [--signal-child-only] [--verbose] [--log-level L] [--log-format F] NAME [--] CMD [ARGS...]
//	distlock status [--url URL] [--json] KEY
//	distlock list [--url URL] [--json] [PREFIX]
//	distlock release --force [--url URL] KEY
//	distlock leader [--url URL] [--json] [--watch] NAME
//	distlock help
//
// run takes the lock on KEY (waiting for it unless told otherwise), starts CMD with
// DISTLOCK_KEY and DISTLOCK_TOKEN (the fencing token) in its environment, keeps
// the lock refreshed while CMD runs, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT
// to it (to its process group, see below), and releases the lock when it exits.
// CMD is killed if distlock itself dies, since the lock dies with distlock. Pass
// DISTLOCK_TOKEN to the resource CMD changes, so the resource can reject a stale
// holder.
//
// Given several keys (before "--", or each with --key), run holds them all
// together: it takes them as lock.Locker.AcquireAll does (all or nothing, in
// byte order, so runs naming the same keys in other orders cannot deadlock),
// gives CMD DISTLOCK_KEYS (the keys in byte order, one per line) and
// DISTLOCK_TOKENS (their tokens, in that order, separated by spaces) instead of
// DISTLOCK_KEY and DISTLOCK_TOKEN, and stops CMD when any one of them is lost.
//
// By default the lock is exclusive. With --shared it is a read lock: runs with
// --shared on KEY hold it together, and a run without it waits until they are
// done; once such an exclusive run waits, later --shared runs wait behind it
// (on backends with writer preference, see each driver's documentation). With
// --permits N, KEY is a counting semaphore: at most N runs hold it at once,
// and every run on KEY must give the same N. A backend that cannot do either
// makes it bad usage (exit 64), as is giving both.
//
// The backend is the URL of --url, else $DISTLOCK_URL, else a file:// directory
// "distlock" under the OS temp directory (flock(2) files: it coordinates the
// processes of one host with no setup). --ttl overrides the URL's ttl parameter.
// On backends whose locks expire it is the lease; on session-bound ones (file,
// PostgreSQL, ZooKeeper) it bounds how long the lock is trusted without a
// confirmed check, so it also bounds how long CMD may run on after a loss
// before distlock notices.
//
// # Lost locks
//
// When the lock may no longer be held, distlock stops CMD first and releases
// last: it sends CMD's process group SIGTERM, waits up to --grace for CMD to
// exit, sends SIGKILL, waits until CMD and the rest of its group have exited,
// and only then releases the lock and closes its connection. What that
// guarantees depends on the backend:
//
//   - Session-bound (PostgreSQL, ZooKeeper, file): the server keeps the lock as
//     long as distlock's session lives, even after distlock stopped trusting
//     it (for example after distlock was paused past its TTL). Nobody else gets
//     the lock until CMD is gone, however long --grace is. If the session
//     itself ends (the connection drops, the ZooKeeper session expires while
//     distlock is paused or cut off), the server frees the lock at once, and
//     another holder may start while CMD is still in its grace.
//   - Expiring (Redis, Redlock, etcd): the server frees the lock TTL after the
//     last refresh it saw, whatever distlock does. distlock therefore takes
//     the lock with lock.WithGrace, so that it stops trusting it TTL − drift −
//     grace after the last confirmed refresh (drift is 1% of the TTL + 2ms): CMD
//     gets SIGTERM early
//     enough to be gone, SIGKILL included, before the server can give the
//     lock to someone else. --grace must be shorter than half the TTL there,
//     and defaults to a third of the TTL when that is less than 10s.
//
// The message distlock prints when a loss stops CMD names the loss's cause:
// force_released (release --force), taken_over (another owner found on the
// backend), server_changed (the server restarted or failed over),
// session_expired (the connection or session the lock was bound to ended),
// expired (no refresh confirmed in time: distlock or the backend stalled or
// could not be reached), or unknown where the backend cannot tell.
//
// # Logs
//
// run and elect log the lock's life on standard error through lock.WithLogger,
// from --log-level on (debug, info, warn, error, off; default warn), as
// logfmt-style text or, with --log-format json, one JSON object per line. At
// warn, the default, a run that goes well prints nothing (cron mails what a
// job prints), while a lost lock with its cause, a backend that became
// unreachable, a server that restarted or failed over, and a server (of a
// Redlock, a Sentinel or a Cluster) that cannot be dialled are logged. info
// adds the recoveries; debug every acquisition and release. The backends'
// clients log there too (go-redis's failed dials), never with a password.
//
// Nothing can stop CMD while distlock itself is paused (SIGSTOP, a stalled
// machine): on an expiring backend the lock may then pass to another holder
// while CMD runs on. A CMD that ignores SIGTERM is killed after --grace.
// Fencing tokens are what protects the resource in every case no lease can
// cover.
//
// # Process groups
//
// CMD runs in a process group of its own, and distlock signals the whole
// group: the forwarded signals, and on a loss SIGTERM, then SIGKILL after
// --grace, so the processes CMD started stop with it. When CMD exits by
// itself, what it left running in its group (a forgotten background job) gets
// the same SIGTERM, --grace, SIGKILL before the lock is released; distlock
// still exits with CMD's status. Processes that leave the group (setsid, a
// daemon) are out of reach.
//
// If distlock itself dies (SIGKILL, the OOM killer), a watcher process it
// starts beside CMD (its own executable, in a group of its own) sees distlock's
// pipe close and kills CMD's group with SIGKILL; on Linux the kernel also kills
// CMD itself at once (PR_SET_PDEATHSIG). The watcher is told the group right
// after CMD starts: a process CMD starts in that instant escapes if distlock
// dies in it too. Where there are no process groups (Windows) only CMD is
// signalled, and nothing is killed when distlock dies.
//
// --signal-child-only signals CMD alone and starts no watcher, for a CMD that
// manages its own processes: on Linux CMD alone is then killed when distlock
// dies, elsewhere nothing is. In the foreground of a terminal CMD stays in
// distlock's process group, so that it can read the terminal and the
// terminal's Ctrl-C and Ctrl-Z reach it, and is signalled alone as with
// --signal-child-only (--verbose says so).
//
// # Leader election
//
// elect campaigns for the leadership of NAME (an election is an exclusive lock
// on NAME, see lock.Locker.Campaign) and runs CMD only while leading, with
// DISTLOCK_KEY, DISTLOCK_TOKEN (the term) and DISTLOCK_LEADER_VALUE (--value)
// in its environment. A lost leadership stops CMD exactly as run stops it on a
// lost lock; then distlock campaigns again, or exits 74 with --once. When CMD
// exits by itself distlock resigns, so another campaigner leads at once, and
// exits with CMD's status.
//
// # Inspection and operator commands
//
// status prints who holds KEY (owner names, set by the holders with
// lock.WithOwnerName, default host:pid), since when and until when, its latest
// token and how many wait; --json prints the same as one JSON object. What the
// backend cannot know is printed as unknown with the reason (PostgreSQL
// without holders=true records no start or token, nor a leader's value and
// term: "unknown (needs holders=true)"); --json leaves it out and names it in
// "unknown", with "unknown_reason". list
// prints the held keys under PREFIX, one per line (--json: an array). release
// --force frees KEY whoever holds it: the holder's lock is lost (its Err
// matches lock.ErrForceReleased) and the next holder's token is larger, so a
// fenced resource rejects the evicted holder. leader prints NAME's leader;
// with --watch it prints every change until interrupted. A backend that cannot
// serve one of these (see its driver's documentation) makes it exit 78, with a
// message naming the URL parameter that enables it where one does (PostgreSQL's
// holders=true for list and release --force).
//
// A usage error prints the error and one line pointing to --help, which
// prints the usage on standard output.
//
// Exit status:
//
//	CMD's own status  when CMD ran and the lock was held throughout
//	128+N             CMD was killed by signal N, or distlock was stopped by signal N while waiting
//	0                 status: KEY is held; leader: NAME has a leader; release --force: KEY freed; list
//	3                 status: KEY is free; leader: NAME has no leader; release --force: KEY was not held
//	64                bad usage: flags, arguments, key, URL, unknown scheme, a
//	                  --grace too long for the TTL, --shared or --permits on a backend
//	                  without such locks, or an N other than the holders' (EX_USAGE)
//	69                the backend could not be opened or reached (EX_UNAVAILABLE)
//	78                status, list, release --force or leader: the backend, as its URL
//	                  configures it, cannot serve the command; the message names the
//	                  URL parameter that enables it where one does (EX_CONFIG)
//	74                the lock was lost (or no longer trusted) while CMD ran; CMD was
//	                  terminated, and the lock released after CMD exited (EX_IOERR);
//	                  elect exits so only with --once
//	75                the lock is held elsewhere: --no-wait, or --wait expired (EX_TEMPFAIL)
//	126               CMD could not be started
//	127               CMD was not found
//
// CMD's own status may coincide with one of these; distlock's reason is always
// printed on standard error. distlock never prints a URL's password.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	// The backends distlock can use, registered by their URL schemes.
	_ "github.com/distlock/lock/etcddriver"
	_ "github.com/distlock/lock/filedriver"
	_ "github.com/distlock/lock/memdriver"
	_ "github.com/distlock/lock/pgadvisory"
	_ "github.com/distlock/lock/redisdriver"
	_ "github.com/distlock/lock/redlockdriver"
	_ "github.com/distlock/lock/zkdriver"
)

// Exit statuses of distlock itself; see the package documentation.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE
	exitUnavailable = 69  // EX_UNAVAILABLE
	exitUnsupported = 78  // EX_CONFIG: not unavailable (69 is worth a retry), not bad usage
	exitLost        = 74  // EX_IOERR
	exitHeld        = 75  // EX_TEMPFAIL
	exitCannotRun   = 126 // as shells do
	exitNotFound    = 127 // as shells do
	exitSignalBase  = 128 // plus the signal number
)

const usage = `usage: distlock run [flags] KEY [--] CMD [ARGS...]
       distlock run [flags] KEY1 KEY2 ... -- CMD [ARGS...]
       distlock elect [flags] NAME [--] CMD [ARGS...]
       distlock status [--url URL] [--json] KEY
       distlock list [--url URL] [--json] [PREFIX]
       distlock release --force [--url URL] KEY
       distlock leader [--url URL] [--json] [--watch] NAME
       distlock help

run: run CMD while holding the lock on KEY. CMD gets DISTLOCK_KEY and
DISTLOCK_TOKEN (the fencing token) in its environment; SIGINT, SIGTERM, SIGHUP
and SIGQUIT are forwarded to it. If the lock is lost CMD gets SIGTERM, then
SIGKILL after --grace, and the lock is released only once CMD has exited. On
backends whose locks expire (Redis, Redlock, etcd) distlock sends the SIGTERM
TTL - grace after the last confirmed refresh, so that CMD is gone before the
lock can expire. Given several keys (before "--", or each with --key) run holds
them all, taken together without deadlock; CMD gets DISTLOCK_KEYS (one per
line, in byte order) and DISTLOCK_TOKENS, and any key's loss stops it. Signals
go to CMD's process group, so what CMD started stops with it; what CMD leaves
running when it exits is stopped the same way before the release; if distlock
dies, a watcher process kills the group.

elect: campaign for the leadership of NAME and run CMD only while leading
(DISTLOCK_TOKEN is the term, DISTLOCK_LEADER_VALUE the --value); on a loss CMD
is stopped as run stops it, then distlock campaigns again (unless --once). When
CMD exits by itself distlock resigns and exits with CMD's status.

status: who holds KEY, since when, until when, its token and its waiters
(what the backend cannot know says unknown and why, e.g. needs holders=true).
list: the held keys under PREFIX. release --force: free KEY whoever holds it
(its holder loses it; the next holder's token fences it out). leader: the
current leader of NAME, or every change of leader with --watch.

Flags of run and elect:
  --url URL     backend URL (default $DISTLOCK_URL, else file://$TMPDIR/distlock)
  --ttl D       lock TTL, e.g. 10s (default: the URL's ttl parameter, else 30s)
  --grace D     after a lost lock, time between SIGTERM and SIGKILL (default 10s;
                where locks expire, under TTL/2 and by default at most TTL/3)
  --verbose     report waiting, acquisition and release on stderr
  --log-level L log the lock's life on stderr from level L: debug, info,
                warn, error or off (default warn: nothing when all goes well;
                a lost lock with its cause, an unreachable backend)
  --log-format F text or json (one object per line) (default text)
  --signal-child-only
                signal CMD alone, not its process group, and kill nothing
                else if distlock dies (for a CMD that manages its own
                processes); in a terminal's foreground this is the default
Flags of run:
  --wait D      give up if the lock is not held after D
  --no-wait     make one attempt; do not wait
  --shared      take a shared (read) lock: --shared runs hold KEY together,
                a run without --shared holds it alone
  --permits N   KEY is a semaphore of N permits: at most N runs hold it at once
                (every run on KEY must give the same N)
  --key KEY     a key to hold; repeat it for several (then every argument is CMD)
Flags of elect:
  --value V     the value published with the leadership (an address, a host)
  --once        exit after losing the leadership instead of campaigning again

Exit status:
  CMD's status  CMD ran and the lock was held throughout (run, elect)
  0             status: KEY is held; leader: NAME has a leader; release: freed
  3             status: KEY is free; leader: no leader; release: KEY was not held
  128+N         CMD was killed by signal N, or distlock got signal N while waiting
  64            bad usage: flags, arguments, key, URL, unknown scheme, a
                --grace too long for the TTL, --shared or --permits where the
                backend has no such locks, or another N than KEY's holders
  69            the backend could not be opened or reached
  78            the backend, as its URL configures it, cannot serve the command
                (status, list, release, leader); the message names the URL
                parameter that enables it, e.g. holders=true
  74            the lock was lost while CMD ran; CMD was terminated first
                (elect: only with --once)
  75            the lock is held elsewhere (--no-wait) or --wait expired
  126           CMD could not be started
  127           CMD was not found
`

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the subcommand named by args[0] and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "distlock", "missing command: run, elect, status, list, release, leader or help")
	}
	switch args[0] {
	case "run":
		return run(args[1:], stdout, stderr, false)
	case "elect":
		return run(args[1:], stdout, stderr, true)
	case "status":
		return status(args[1:], stdout, stderr)
	case "list":
		return list(args[1:], stdout, stderr)
	case "release":
		return forceRelease(args[1:], stdout, stderr)
	case "leader":
		return leader(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case groupWatcherCommand:
		return runGroupWatcher(args[1:])
	case execGateCommand:
		return runExecGate(args[1:])
	default:
		return usageError(stderr, "distlock", "unknown command %q", args[0])
	}
}

// usageError prints a usage error as one line, then one line pointing to
// the usage (which is long: printed after every mistake it would hide the
// message), and returns exitUsage.
func usageError(stderr io.Writer, prefix, format string, a ...any) int {
	fmt.Fprintf(stderr, prefix+": "+format+"\n", a...)
	fmt.Fprintln(stderr, usageHint)
	return exitUsage
}

// usageHint follows every usage error.
const usageHint = `run "distlock --help" for the usage`

// parseFlags parses args with fs, printing a flag error as a usage error,
// and -h or --help as the whole usage on stdout. ok false: stop with status.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (status int, ok bool) {
	fs.SetOutput(io.Discard) // its errors are printed below, its usage never
	fs.Usage = func() {}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK, false
	case err != nil:
		return usageError(stderr, fs.Name(), "%v", err), false
	}
	return 0, true
}
