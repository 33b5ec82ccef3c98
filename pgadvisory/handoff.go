package pgadvisory

// Work left in flight when its caller's context ends.
//
// A statement on a lock session cannot be cancelled on the server without
// risk to the session's other locks (a cancel request ends whatever the
// session runs when it arrives), and closing the connection ends the session.
// So a statement whose caller's context ends before its answer goes on without
// the caller: reading the answer, and what it means for the driver's books,
// move to a goroutine of the driver's (d.calls; roundTrip in flight.go, which
// reads in the caller's goroutine until then and goes on with
// kit.Handoff.Continue, or with kit.Run from the start for the query modes
// pgx runs), and the caller returns. Work whose caller left finishes on
// its own: the server answers, or the session is cut stmtGrace after the
// context ended and its locks are reported lost; Close ends it without the
// server and waits for it, so that none outlives the Driver.
//
// Work whose outcome would give its caller something to undo (a lock) asks its
// kit.Handoff (Deliver), before committing to it, whether the caller will
// receive it, and undoes it itself if not. An acquire whose context ended
// still waits up to settleWait for that undoing (a lock given back, a wait
// cancelled and its session cleared): a server that answers needs a few
// milliseconds for it, so the call leaves nothing behind; a frozen server is
// left to the background.

import (
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

// settleWait is how long an acquire whose context ended waits for the server
// to settle what the acquire started (about 2 ms for a cancel request and the
// clearing on the development machine, a round trip to give back a lock).
const settleWait = 50 * time.Millisecond

// errBusy is the error of a Refresh or Release whose context ended while the
// session was busy with another statement: nothing was sent.
func errBusy(what string, ctxErr error) error {
	return fmt.Errorf("%w: pgadvisory: %s not sent: the lock's session was busy with another statement until the context ended: %w",
		driver.ErrUnavailable, what, ctxErr)
}

// errNoAnswer is the error of a Refresh or Release whose context ended before
// the server answered its statement, which goes on in the background: the
// outcome is unknown (driver.ErrUnavailable), and it matches ctxErr.
func errNoAnswer(what string, ctxErr error) error {
	return fmt.Errorf("%w: pgadvisory: %s: no answer from the server before the context ended (the statement goes on in the background): %w",
		driver.ErrUnavailable, what, ctxErr)
}
