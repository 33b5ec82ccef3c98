package pgadvisory

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultPrefix namespaces lock ids and names the fencing sequence when no
// prefix is given.
const DefaultPrefix = "distlock"

// DefaultMaxConns is how many dedicated lock connections a Driver opens at most
// when WithMaxConns is not given.
const DefaultMaxConns = 10

// DefaultLocksPerConn is the soft limit of locks on one connection when
// WithLocksPerConn is not given.
const DefaultLocksPerConn = 2000

// Option configures a Driver made by New. (A Driver that lock.Open makes is
// configured by the URL's parameters.)
type Option func(*options)

type options struct {
	prefix       string
	fencing      bool
	fenceSeq     string // "" means prefix + "_fence"
	fenceCreate  bool
	maxConns     int
	locksPerConn int
	holders      bool  // write holders rows (see WithHolders)
	err          error // the first invalid option, reported by New or lock.Open
}

func defaultOptions() options {
	return options{prefix: DefaultPrefix, fencing: true, fenceCreate: true, maxConns: DefaultMaxConns, locksPerConn: DefaultLocksPerConn}
}

// WithPrefix sets the namespace of the driver: it is hashed into every lock id
// (see LockID), so drivers with different prefixes never share a lock, and it
// names the default fencing sequence, <prefix>_fence. It must be non-empty valid
// UTF-8 without control characters; empty means DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix == "" {
			prefix = DefaultPrefix
		}
		if err := validPrefix(prefix); err != nil {
			o.fail(err)
		}
		o.prefix = prefix
	}
}

// WithFencing turns fencing tokens on (the default) or off. Off, the driver needs
// no sequence and so no DDL rights or USAGE grant, and Token reports
// ErrUnsupported.
func WithFencing(on bool) Option {
	return func(o *options) { o.fencing = on }
}

// WithFenceSequence names the sequence that fencing tokens come from, optionally
// schema-qualified in SQL syntax ("locks.fence", "\"My Schema\".fence"). The
// default is <prefix>_fence in the first schema of the search_path.
func WithFenceSequence(name string) Option {
	return func(o *options) {
		if strings.TrimSpace(name) == "" || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
			o.fail(fmt.Errorf("pgadvisory: fence sequence name %q is empty or not valid UTF-8", name))
		}
		o.fenceSeq = name
	}
}

// WithFenceCreate says whether the driver may create a missing fencing sequence
// (CREATE SEQUENCE IF NOT EXISTS, on first use; the default). With false, a
// missing sequence is an error that gives the statement a privileged user can
// run once.
func WithFenceCreate(create bool) Option {
	return func(o *options) { o.fenceCreate = create }
}

// WithMaxConns caps the dedicated lock connections of the Driver: those holding
// locks (many each) plus those waiting in PostgreSQL's lock queue (one each).
// Beyond the cap, a blocking Acquire falls back to retrying without a queue
// place until a connection frees up. It must be at least 2.
func WithMaxConns(n int) Option {
	return func(o *options) {
		if n < 2 {
			o.fail(fmt.Errorf("pgadvisory: max lock connections %d: want at least 2 (one to hold, one to wait)", n))
		}
		o.maxConns = n
	}
}

// WithLocksPerConn sets the soft limit of locks held on one connection: a new
// connection (below the WithMaxConns cap) is opened for further locks once every
// connection holds that many. PostgreSQL walks all of a session's locks at the
// end of every statement (about 0.1µs per lock on the development machine, so a
// session holding 2,000 adds some 0.2 ms to each of its statements): fewer locks
// per connection means faster statements and more connections. It must be at
// least 1.
func WithLocksPerConn(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.fail(fmt.Errorf("pgadvisory: locks per connection %d: want at least 1", n))
		}
		o.locksPerConn = n
	}
}

// WithHolders turns on the holders table, <prefix>_holders (created on first
// use, UNLOGGED): each grant writes a row naming its owner, label, token and
// start beside the advisory lock, which Inspect, List, Relabel, ForceRelease
// and leader election read. It costs each acquire and release one more
// statement. Off (the default), Inspect reports holders from pg_locks without
// owners or labels, and List, Relabel and ForceRelease are unsupported. See
// "Inspection, eviction and leader election" in the package documentation.
func WithHolders(on bool) Option {
	return func(o *options) { o.holders = on }
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o options) apply(opts []Option) options {
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// validPrefix accepts what the portable layer accepts for a prefix: valid UTF-8
// without control characters. The lack of control characters is what makes
// prefix + "\n" + key an unambiguous input of the lock id hash.
func validPrefix(p string) error {
	if !utf8.ValidString(p) {
		return fmt.Errorf("pgadvisory: prefix %q is not valid UTF-8", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("pgadvisory: prefix %q contains a control character", p)
		}
	}
	return nil
}
