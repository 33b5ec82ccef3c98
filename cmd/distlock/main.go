// Command distlock runs a command while holding a distributed lock, like flock(1)
// or etcdctl lock, on any distlock backend.
//
//	distlock run [--url URL] [--ttl D] [--wait D | --no-wait] [--grace D] [--verbose] KEY [--] CMD [ARGS...]
//	distlock help
//
// run takes the lock on KEY (waiting for it unless told otherwise), starts CMD with
// DISTLOCK_KEY and DISTLOCK_TOKEN (the fencing token) in its environment, keeps
// the lock refreshed while CMD runs, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT
// to it, and releases the lock when it exits. If the lock is lost while CMD runs,
// distlock sends CMD SIGTERM, then SIGKILL after the grace period. On Linux CMD
// is killed if distlock itself dies, since the lock dies with distlock. Pass
// DISTLOCK_TOKEN to the resource CMD changes, so the resource can reject a stale
// holder.
//
// The backend is the URL of --url, else $DISTLOCK_URL, else a file:// directory
// "distlock" under the OS temp directory (flock(2) files: it coordinates the
// processes of one host with no setup). --ttl overrides the URL's ttl parameter.
// On backends whose locks expire it is the lease; on session-bound ones (file,
// PostgreSQL, ZooKeeper) it bounds how long the lock is trusted without a
// confirmed check, so it also bounds how long CMD may run on after a loss
// before distlock notices.
//
// Exit status:
//
//	CMD's own status  when CMD ran and the lock was held throughout
//	128+N             CMD was killed by signal N, or distlock was stopped by signal N while waiting
//	64                bad usage: flags, arguments, key, URL or unknown scheme (EX_USAGE)
//	69                the backend could not be opened or reached (EX_UNAVAILABLE)
//	74                the lock was lost while CMD ran; CMD was terminated (EX_IOERR)
//	75                the lock is held elsewhere: --no-wait, or --wait expired (EX_TEMPFAIL)
//	126               CMD could not be started
//	127               CMD was not found
//
// CMD's own status may coincide with one of these; distlock's reason is always
// printed on standard error. distlock never prints a URL's password.
package main

import (
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
	exitLost        = 74  // EX_IOERR
	exitHeld        = 75  // EX_TEMPFAIL
	exitCannotRun   = 126 // as shells do
	exitNotFound    = 127 // as shells do
	exitSignalBase  = 128 // plus the signal number
)

const usage = `usage: distlock run [flags] KEY [--] CMD [ARGS...]
       distlock help

Run CMD while holding the lock on KEY. CMD gets DISTLOCK_KEY and DISTLOCK_TOKEN
(the fencing token) in its environment; SIGINT, SIGTERM, SIGHUP and SIGQUIT are
forwarded to it; if the lock is lost CMD gets SIGTERM, then SIGKILL after --grace.

Flags:
  --url URL     backend URL (default $DISTLOCK_URL, else file://$TMPDIR/distlock)
  --ttl D       lock TTL, e.g. 10s (default: the URL's ttl parameter, else 30s)
  --wait D      give up if the lock is not held after D
  --no-wait     make one attempt; do not wait
  --grace D     after a lost lock, time between SIGTERM and SIGKILL (default 10s)
  --verbose     report waiting, acquisition and release on stderr

Exit status:
  CMD's status  CMD ran and the lock was held throughout
  128+N         CMD was killed by signal N, or distlock got signal N while waiting
  64            bad usage: flags, arguments, key, URL or unknown scheme
  69            the backend could not be opened or reached
  74            the lock was lost while CMD ran; CMD was terminated
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
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return run(args[1:], stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "distlock: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}
