// Package fence is the resource's side of fencing: it makes the store a lock
// protects refuse a write from a holder that has been superseded, which is the
// one thing a lease cannot do by itself.
//
// A lock's holder can pause (a GC pause, swap, SIGSTOP, a VM migration) past its
// TTL, the backend gives the lock to a second holder, and the first wakes up
// believing it still holds the lock. Every fencing backend hands each holder a
// token (lock.Lock.Token) larger than every token handed out before on the key.
// A Checker stored beside the resource remembers the largest token it has
// admitted for each resource name and refuses smaller ones with ErrStale, so the
// woken holder's write is refused instead of overwriting the newer holder's.
//
//	err := locker.Do(ctx, "invoice:42", func(ctx context.Context) error {
//		l, _ := lock.FromContext(ctx)
//		tx, _ := db.BeginTx(ctx, nil)
//		defer tx.Rollback()
//		if err := f.Admit(ctx, tx, "invoice:42", l.Token()); err != nil {
//			return err // errors.Is(err, fence.ErrStale): a newer holder wrote
//		}
//		// ... the guarded write, in tx ...
//		return tx.Commit()
//	})
//
// # The rule: admit a token at least as large as every one admitted before
//
// A Checker admits token t for a resource when t >= the largest token admitted
// for it so far, and then remembers t. Equal is admitted because one holder
// writes many times with its one token (the "WHERE fence < $tok" this
// repository once showed refused a holder's second write). Strictly smaller is
// refused because a smaller token belongs to a holder the lock has since been
// given away from. The check and the write must be atomic with respect to other
// writers (one statement, one transaction holding the row lock, one mutex):
// otherwise an old holder can pass the check, pause, and write after a newer one.
//
// # Which fence for which store
//
//   - SQL: a table in a PostgreSQL, MySQL/MariaDB or SQLite database, checked
//     in the guarded write's own transaction (Admit before the write), or
//     StaleIfNoRows for a table that carries its own fence column.
//   - Memory: a resource in one process; Guard runs the write under the check.
//   - Handler: an HTTP service that is itself the resource; clients send
//     Header (SetHeader), for example curl -H "Fencing-Token: report;$DISTLOCK_TOKEN"
//     from a distlock run child.
//   - Redis and etcd as the resource: their driver modules' fenced writes, which
//     keep the root module free of their clients.
//
// # Token 0
//
// Token 0 is never admitted. No lock has it: lock.Lock.Token is at least 1,
// and panics on a backend without fencing (Redlock, redis://...?fencing=false)
// rather than return a token that protects nothing. A 0 is therefore a token
// that was never set (a variable left at its zero value, a missing
// DISTLOCK_TOKEN, a driver.Grant from a backend without fencing), and
// admitting it would make an unfenced writer look fenced. Admit returns an
// error matching ErrZeroToken (and lock.ErrInvalidArgument) and changes
// nothing. To make a program refuse to start on a backend without tokens,
// open it with lock.WithRequired(lock.Capabilities{Fencing: true}).
//
// # Resource names
//
// A resource name is any non-empty valid UTF-8 string of at most 1024 bytes
// without control characters (it travels in an HTTP header). Usually it is the
// lock's key. Names are compared byte for byte. A bad name gets an error
// matching ErrInvalidResource (and lock.ErrInvalidArgument) and changes nothing.
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

// Errors. ErrZeroToken and ErrInvalidResource also match lock.ErrInvalidArgument.
var (
	// ErrStale is returned by Admit when the token is below the largest token
	// already admitted for the resource: a newer holder exists. The error is a
	// *StaleError naming the resource and the token offered, never the data.
	ErrStale = errors.New("stale fencing token")

	// ErrZeroToken is returned by Admit for token 0, which no lock has (see
	// Token 0 above) and no Checker admits.
	ErrZeroToken = fmt.Errorf("%w: fencing token 0 (no lock has it: a token never set, or from a backend without fencing)", driver.ErrInvalidArgument)

	// ErrInvalidResource is returned by Admit for a resource name that is
	// empty, longer than 1024 bytes, not valid UTF-8, or holds a control
	// character.
	ErrInvalidResource = fmt.Errorf("%w: resource name", driver.ErrInvalidArgument)
)

// MaxResourceLen is the longest resource name in bytes.
const MaxResourceLen = 1024

// Checker admits fencing tokens for named resources.
type Checker interface {
	// Admit admits token for resource if it is at least as large as every
	// token admitted before for resource (equal is admitted: one holder
	// writes many times) and remembers the largest. It returns an error
	// matching ErrStale otherwise, ErrZeroToken for token 0 and
	// ErrInvalidResource for a bad name, and changes nothing then.
	Admit(ctx context.Context, resource string, token uint64) error
}

// StaleError is the error of a refused token. It matches ErrStale.
type StaleError struct {
	Resource string // the resource name, as given to Admit
	Token    uint64 // the token offered
	// Highest is the highest token the resource has admitted, where the
	// checker learns it with the refusal (Memory, the MySQL dialect of SQL);
	// 0 where it does not (the Postgres and SQLite dialects, StaleIfNoRows).
	Highest uint64
}

func (e *StaleError) Error() string {
	msg := "fence: resource " + strconv.Quote(e.Resource) + ": token " +
		strconv.FormatUint(e.Token, 10) + " is stale: a newer holder has been admitted"
	if e.Highest > 0 {
		msg += " (token " + strconv.FormatUint(e.Highest, 10) + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// stale returns the error for a refused token; highest is 0 if unknown.
func stale(resource string, token, highest uint64) error {
	return &StaleError{Resource: resource, Token: token, Highest: highest}
}

// checkArgs returns the error for a bad resource name or token, nil for good ones.
func checkArgs(resource string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("fence: resource %q: %w", resource, ErrZeroToken)
	}
	return checkResource(resource)
}

func checkResource(resource string) error {
	switch {
	case resource == "":
		return fmt.Errorf("fence: %w is empty", ErrInvalidResource)
	case len(resource) > MaxResourceLen:
		return fmt.Errorf("fence: %w is %d bytes, longer than %d", ErrInvalidResource, len(resource), MaxResourceLen)
	case !utf8.ValidString(resource):
		return fmt.Errorf("fence: %w is not valid UTF-8", ErrInvalidResource)
	}
	for _, r := range resource {
		if unicode.IsControl(r) {
			return fmt.Errorf("fence: %w %q holds a control character", ErrInvalidResource, resource)
		}
	}
	return nil
}
