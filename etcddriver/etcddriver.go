// Package etcddriver is the distlock driver for etcd v3: locks are keys written
// with a lease, ordered by their create revision, in the layout of etcd's own
// concurrency.Mutex and etcdctl lock, so that those and this driver exclude each
// other.
//
//	import _ "github.com/distlock/lock/etcddriver"
//
//	locker, err := lock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp")
//
// Users who already have a *clientv3.Client build the driver from it with New and
// pass it to lock.New. The recipe, the proofs and the measured figures are in
// https://github.com/distlock/lock/blob/main/docs/backends/etcd.md.
//
// # URL format
//
//	etcd://[user:password@]host1:2379[,host2:2379...]/prefix
//	etcds://host:2379/myapp?cacert=/etc/etcd/ca.pem&cert=/etc/etcd/client.pem&key=/etc/etcd/client-key.pem
//
// A host without a port gets 2379; the path is the key prefix (DefaultPrefix,
// /distlock, when empty), or the portable prefix parameter names it, not both.
// The driver's own parameters are etcdctl's flags of the same names:
//
//   - cacert, cert, key, server_name (etcds:// only): the CA file, the client
//     certificate and its key (both or neither), the name to verify.
//   - dial_timeout (default 5s): how long Open waits for etcd.
//   - keepalive_time and keepalive_timeout (defaults 10s and 5s): the gRPC
//     connection's pings.
//
// Any other parameter is an error that lists these. Open checks the credentials
// and the permission to read and write the prefix's range before it returns.
//
// # Key layout
//
//	<prefix>/<escaped k>/<lease hex>[_<n>]           exclusive
//	<prefix>/<escaped k>/read/<lease hex>[_<n>]      shared
//	<prefix>/<escaped k>/sem/<n>/<lease hex>[_<n>]   one permit of a semaphore of n
//
// The key with the lowest create revision holds; each waiter watches only the key
// before its own. Driver.LockPrefix gives the name etcdctl lock and
// concurrency.NewMutex take for the same lock.
//
// # Capabilities
//
//   - Fencing: yes; the token is the create revision of the holder's key,
//     cluster-wide; Fenced fences writes to etcd itself.
//   - Expiring: yes; a lock lives for its TTL unless refreshed.
//   - Notify: yes; a waiter is woken by the delete of its predecessor's key.
//   - FIFO: yes; requests are served in the order their keys were created.
//   - Shared and WriterPreference: yes; a reader waits for every exclusive key
//     created before its own.
//   - Permits: yes; a mismatched n, or a semaphore used as a lock, is
//     driver.ErrInvalidArgument where the request can see it.
//   - MinTTL: the server's minimum lease TTL (2s by default), measured by New;
//     MaxTTL: 366 days (driver.DefaultMaxTTL).
//
// # Inspection, eviction and leader election
//
// A key's value is the holder's label and owner ID. Inspect, List, Relabel and
// Watch read and watch the lock's range; ForceRelease deletes the holders' keys
// and leaves a tombstone under <prefix>/!forced, so the evicted holder reports
// lock.ErrForceReleased at its next refresh. concurrency.Election on the same
// name shares one leadership with lock.Campaign.
//
// # Lost locks
//
// Lost closes when etcd says the lease is gone, when no keepalive was confirmed
// within the TTL (less the drift allowance, so before etcd can expire it), when a
// refresh finds the key deleted or replaced, and within a round trip of a
// reconnection to a server that lost its data (a URL's client retries connecting
// within about a second). Causes: lock.ErrSessionExpired, lock.ErrExpired,
// lock.ErrTakenOver, lock.ErrForceReleased.
//
// # Why release needs no compare
//
// Release is a plain Delete of a key name that only its request can have (the
// hex of a lease this Driver was granted, plus a number it gives no other live
// request); after a release whose outcome is unknown the name stays reserved
// until the lease ends, so a late duplicate never deletes a newer lock (etcd
// issue #22082).
//
// # Limits
//
//   - TTLs below etcd's minimum lease are refused; on a cluster keep the TTL
//     well above an election's duration.
//   - A holder on the minority side of a partition learns of the loss at its
//     lease's deadline.
//   - Close waits at most half a second for its revokes; against a silent
//     server its locks stay until their lease expires.
//   - Prefixes must not nest (see WithPrefix); keys others write in a lock's
//     range count as contenders, as for concurrency.Mutex.
package etcddriver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/driver/kit"
)

// DefaultPrefix is the key prefix when none is given: locks live under
// /distlock/.
const DefaultPrefix = "/distlock"

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix string
	minTTL time.Duration
}

// WithPrefix sets the etcd key prefix every lock lives under (trailing slashes are
// dropped; empty means DefaultPrefix). Two drivers exclude each other only if
// they use the same prefix, and one prefix must not lie inside another's locks:
// with prefixes /a and /a/b, the lock "b" of the first would contain the locks of
// the second.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithMinTTL declares the server's minimum lease TTL instead of measuring it.
// New normally asks etcd for a one-second lease and reads the TTL it grants
// (etcd raises short TTLs to a minimum derived from its election timeout: 2s with
// the defaults). A wrong value does no harm beyond an error: if etcd later grants
// a longer lease than asked, the acquisition fails with ErrUnsupported.
func WithMinTTL(d time.Duration) Option { return func(o *options) { o.minTTL = d } }

// Driver takes locks in etcd. Use it through lock.New or lock.Open; its methods
// implement driver.Driver, driver.Acquirer, driver.SetAcquirer and
// driver.BatchRefresher, and the inspection and operator interfaces (see
// Inspection, eviction and leader election).
type Driver struct {
	c      *clientv3.Client
	owned  bool // Close closes c
	prefix string
	minTTL time.Duration

	ctx          context.Context // cancelled by Close: ends keepalives, background deletes, watchConnection
	cancel       context.CancelFunc
	revokeCtx    context.Context // cancelled by Close once its own revokes are done: ends background revokes
	revokeCancel context.CancelFunc
	closeClient  func()       // releases what open made for the client it owns; nil for New
	logs         *kit.LogSink // the client's zap logger passes its lines here (logging.go); nil for New
	wg           sync.WaitGroup

	// held is the driver's mutex, its entries by user key (chained through
	// entry.next) and its closed gate (Done ends waiting Acquire calls); it
	// guards the fields below.
	held   *kit.Book[string, *entry]
	leases map[leaseSlot]*session // the live sessions, by lease TTL in seconds and place
	epoch  time.Time              // entries keep their times as offsets from it
	rw     *refreshWatch          // the prefix watch that confirms refreshes of many locks; nil until started
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Acquirer       = (*Driver)(nil)
	_ driver.BatchRefresher = (*Driver)(nil)
	_ driver.SetAcquirer    = (*Driver)(nil)
)

// probeTimeout bounds New's checks of the server: access to the prefix and the
// minimum lease TTL.
const probeTimeout = 10 * time.Second

// Limits of etcd's lease TTL (its lease.MaxLeaseTTL, about 285 years), in
// etcd's unit and as a Duration; the latter fits: 9e18 ns < 2^63 ns.
const (
	maxLeaseSeconds = clientv3.MaxLeaseTTL
	maxLeaseTTL     = time.Duration(maxLeaseSeconds) * time.Second
)

// New returns a Driver that locks with the client c, which stays the caller's:
// Close does not close it. New needs the server to answer: it checks that the
// client may read and write under the prefix (so missing or wrong credentials
// fail here, not at the first acquire) and, unless WithMinTTL is given, asks etcd
// for the minimum lease TTL it grants. It waits for at most 10 seconds, or until
// the client's context ends.
func New(c *clientv3.Client, opts ...Option) (*Driver, error) {
	ctx, cancel := context.WithTimeout(c.Ctx(), probeTimeout)
	defer cancel()
	d, err := newDriver(ctx, c, false, opts)
	if err != nil && transient(err) {
		err = fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return d, err
}

func newDriver(ctx context.Context, c *clientv3.Client, owned bool, opts []Option) (*Driver, error) {
	if c == nil {
		return nil, fmt.Errorf("etcddriver: nil client")
	}
	var cfg options
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.minTTL < 0 {
		return nil, fmt.Errorf("etcddriver: negative minimum TTL %v", cfg.minTTL)
	}
	prefix := normalizePrefix(cfg.prefix)
	ctx = requireLeader(ctx)
	if err := verifyAccess(ctx, c, prefix); err != nil {
		return nil, err
	}
	if cfg.minTTL == 0 {
		m, err := measureMinTTL(ctx, c)
		if err != nil {
			return nil, err
		}
		cfg.minTTL = m
	}
	d := &Driver{
		c:      c,
		owned:  owned,
		prefix: prefix,
		minTTL: cfg.minTTL,
		held:   kit.NewBook[string, *entry](),
		leases: map[leaseSlot]*session{},
		epoch:  time.Now(),
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.revokeCtx, d.revokeCancel = context.WithCancel(context.Background())
	if cc := c.ActiveConnection(); cc != nil {
		d.wg.Add(1)
		go d.watchConnection(cc)
	}
	return d, nil
}

// verifyAccess checks, in one transaction that changes nothing, that the client
// may read the prefix's whole range and write in it, as locking needs: etcd
// checks the permissions of both branches of a transaction, and the branch
// with the put is never taken (no create revision is negative). Being a write,
// it also shows that the cluster has a quorum.
func verifyAccess(ctx context.Context, c *clientv3.Client, prefix string) error {
	probe := prefix + "/"
	_, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(probe), "<", 0)).
		Then(clientv3.OpPut(probe, "")).
		Else(clientv3.OpGet(probe, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
		Commit()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcddriver: etcd requires authentication: give a user and password (%s://user:password@host/prefix): %w", Scheme, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcddriver: user %q may not read and write the keys under %q: %w", c.Username, prefix, err)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("etcddriver: authentication as user %q failed: %w", c.Username, err)
	}
	return fmt.Errorf("etcddriver: checking access to the keys under %q: %w", prefix, err)
}

// measureMinTTL asks for a one-second lease and reads back what etcd granted:
// etcd raises a TTL below its minimum (1.5 election timeouts, rounded up to whole
// seconds) without saying so, and a lock that lives longer than its holder thinks
// delays everyone else after a crash.
func measureMinTTL(ctx context.Context, c *clientv3.Client) (time.Duration, error) {
	g, err := c.Grant(ctx, 1)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	granted := g.TTL
	ttl, err := c.TimeToLive(ctx, g.ID)
	if err == nil && ttl.GrantedTTL > granted {
		granted = ttl.GrantedTTL
	}
	_, rerr := c.Revoke(ctx, g.ID)
	if err != nil {
		return 0, fmt.Errorf("etcddriver: measuring the server's minimum lease TTL: %w", err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("etcddriver: revoking the probe lease: %w", rerr)
	}
	if granted < 1 || granted > maxLeaseSeconds {
		return 0, fmt.Errorf("etcddriver: etcd granted a lease of %ds for 1s", granted)
	}
	return time.Duration(granted) * time.Second, nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Fencing:          true,
		Expiring:         true,
		Notify:           true,
		FIFO:             true,
		Shared:           true,
		WriterPreference: true,
		Permits:          true,
		MinTTL:           max(d.minTTL, driver.FloorTTL),
		MaxTTL:           min(maxLeaseTTL, driver.DefaultMaxTTL),
	}
}

// Prefix returns the etcd key prefix the driver's locks live under.
func (d *Driver) Prefix() string { return d.prefix }

// LockPrefix returns the name that etcd's own tools take for the lock on key:
// `etcdctl lock <name>` and concurrency.NewMutex(session, name) contend for the
// same lock as this driver does.
func (d *Driver) LockPrefix(key string) string { return lockPrefix(d.prefix, key) }

// Leases returns the leases the driver keeps alive now, one per distinct lease TTL
// in use. Revoking one (etcdctl lease revoke) ends every lock on it: the driver
// notices at its next keepalive and closes their Lost channels.
func (d *Driver) Leases() []clientv3.LeaseID {
	d.held.Lock()
	defer d.held.Unlock()
	var ids []clientv3.LeaseID
	for _, s := range d.leases {
		select {
		case <-s.ready:
			if s.grantErr == nil {
				ids = append(ids, s.id)
			}
		default:
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (d *Driver) isClosed() bool {
	d.held.Lock()
	defer d.held.Unlock()
	return d.held.ClosedLocked()
}

// String names the driver by its prefix; it never prints credentials.
func (d *Driver) String() string { return "etcddriver(" + d.prefix + ")" }

// Close revokes the driver's leases, which releases every lock it holds at once
// (their Lost channels close), ends waiting Acquire calls with ErrClosed, stops
// the background keepalives, and closes the client if the driver opened it. It
// waits for the revokes for at most half a second: against a server that does
// not answer, Close returns after that and the leases expire by themselves. Calls
// after Close return ErrClosed; calling Close again returns nil.
func (d *Driver) Close() error {
	d.held.Lock()
	if _, first := d.held.CloseLocked(); !first {
		d.held.Unlock()
		return nil
	}
	var live []*session
	var lost []lostSet
	for _, s := range d.leases {
		select {
		case <-s.ready:
		default:
			continue // its grant sees closed and revokes
		}
		if s.grantErr != nil {
			continue
		}
		live = append(live, s)
		lost = append(lost, s.endLocked(driver.ErrClosed))
	}
	d.held.Unlock()
	d.cancel()
	for _, l := range lost {
		l.run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeRevokeTimeout)
	var wg sync.WaitGroup
	for _, s := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = d.c.Revoke(ctx, s.id)
		}()
	}
	wg.Wait()
	cancel()
	d.revokeCancel() // background revokes had as long; they end now
	d.wg.Wait()
	if !d.owned {
		return nil
	}
	err := d.c.Close()
	if d.closeClient != nil {
		d.closeClient()
	}
	return err
}
