package driver

import (
	"context"
	"errors"
	"time"
)

// ErrForceReleased is the cause a driver gives (wrapped in ErrNotHeld from
// Refresh, or passed to Request.Lost) for a lock that an operator freed with
// Evictor.ForceRelease, where it can tell that from an ordinary loss.
var ErrForceReleased = errors.New("force-released by an operator")

// Holder is one holder of a key as the backend records it.
type Holder struct {
	// Owner is the holder's Request.Owner.
	Owner string
	// Label is the holder's Request.Label as the backend stores it.
	Label string
	// Shared: a shared (read) hold. False for exclusive holds and permits.
	Shared bool
	// Token is the holder's fencing token; zero without fencing.
	Token uint64
	// Since is when the hold was granted, by the backend's clock where it
	// records one; zero where it records none (the portable layer then reads
	// the time the holder wrote into its label).
	Since time.Time
	// Expires is when the hold ends unless refreshed, by the backend's clock;
	// zero for session-bound holds.
	Expires time.Time
}

// Info is what Inspector.Inspect reports about one key.
type Info struct {
	// Holders are the key's live holders, in grant order; empty when free.
	Holders []Holder
	// Token is the latest token granted on the key (zero when unknown or
	// without fencing): at least every holder's.
	Token uint64
	// Waiters is how many requests wait for the key, or -1 where the backend
	// cannot know.
	Waiters int
	// Permits is the key's number of permits while it is a semaphore, else 0.
	Permits int
}

// Inspector is implemented by drivers that can describe a key's holders.
type Inspector interface {
	// Inspect reports key's holders as the backend sees them now. It changes
	// nothing on the backend.
	Inspect(ctx context.Context, key string) (Info, error)
}

// Lister is implemented by drivers whose backend can enumerate held keys.
type Lister interface {
	// List returns the keys under prefix (a prefix of the user's keys, "" for
	// all) that have at least one live holder, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
}

// Evictor is implemented by drivers that can free a key whoever holds it.
type Evictor interface {
	// ForceRelease frees key of all its holders and returns how many there
	// were (ErrNotHeld when none). Afterwards the evicted holders' Refresh
	// returns ErrNotHeld (wrapping ErrForceReleased where the driver can tell),
	// their Release never frees a later holder, and the next grant on the key
	// gets a token larger than every evicted holder's.
	ForceRelease(ctx context.Context, key string) (int, error)
}

// Labeler is implemented by drivers that can change a held lock's label.
type Labeler interface {
	// Relabel stores label (at most MaxLabelLen bytes of valid UTF-8) as the
	// label of req.Owner's hold on req.Key in place of req.Label, which stays
	// as it was, and returns ErrNotHeld when req.Owner does not hold it.
	Relabel(ctx context.Context, req *Request, label string) error
}

// Watcher is implemented by drivers whose backend can tell of changes to a
// key's holders (a watch, a notification channel).
type Watcher interface {
	// Watch sends on the returned channel (without blocking; one pending
	// signal at most) after every change to key's holders from the moment
	// Watch returns, until ctx ends; then it closes the channel. A signal may
	// also come without a change; a reader looks again with Inspect.
	Watch(ctx context.Context, key string) (<-chan struct{}, error)
}
