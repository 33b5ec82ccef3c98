package zkdriver

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
)

// DefaultPrefix is the node under which every key's lock lives when no prefix
// is given.
const DefaultPrefix = "distlock"

// Option configures a Driver made with New.
type Option func(*options)

type options struct {
	prefix         string
	chroot         string
	acl            []zk.ACL
	sessionTimeout time.Duration
	writeNodes     bool
	err            error
}

// WithPrefix sets the namespace: every lock lives under /<prefix>/ (escaped as
// one node name, as keys are). Empty means DefaultPrefix, as in every driver;
// the prefix must be valid UTF-8.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if !utf8.ValidString(prefix) {
			o.fail(fmt.Errorf("zkdriver: prefix %q is not valid UTF-8", prefix))
		}
		if prefix == "" {
			prefix = DefaultPrefix
		}
		o.prefix = prefix
	}
}

// WithChroot puts the prefix under an existing or new path, such as
// "/services/billing", as a chroot suffix in the Java client's connect string
// would. go-zookeeper has no chroot of its own, so the driver prepends it.
func WithChroot(path string) Option {
	return func(o *options) {
		c, err := parseChroot(path)
		if err != nil {
			o.fail(fmt.Errorf("zkdriver: %w", err))
		}
		o.chroot = c
	}
}

// WithACL sets the ACL of the nodes the driver creates (the prefix node, each
// key's node and the lock nodes). The default is zk.WorldACL(zk.PermAll).
// Whoever locks the same keys needs create, delete and read permission on them.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.fail(errors.New("zkdriver: empty ACL"))
		}
		o.acl = acl
	}
}

// WithSessionTimeout tells the driver the session timeout the connection
// negotiated with the server (go-zookeeper does not tell). With it, a held lock
// counts as lost once that long has passed since the ensemble's leader is
// known to have heard of the session (the driver sends a sync every third of
// it), before the leader can expire the session and let another client in;
// see "Sessions and lost locks" in the package documentation. Without it only
// the TTL bounds how long a lock is trusted without contact, so keep the TTL at
// most the session timeout. If the server may have lowered the timeout (its
// maxSessionTimeout), give the lower value.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.fail(fmt.Errorf("zkdriver: session timeout %v is negative", d))
		}
		o.sessionTimeout = d
	}
}

// WithWriteLockNodes makes exclusive requests queue as the write lock of
// Curator's InterProcessReadWriteLock ("__WRIT__" nodes) instead of as an
// InterProcessMutex ("lock-" nodes): use it where Java services lock the same
// keys with InterProcessReadWriteLock, so that their readers wait for this
// driver's exclusive holders and their writers for all of this driver's
// holders. Such exclusive locks no longer exclude an InterProcessMutex or a
// zk.Lock on the key (see "Curator and zk.Lock" in the package
// documentation). The URL parameter exclusive=write does the same.
func WithWriteLockNodes() Option {
	return func(o *options) { o.writeNodes = true }
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}
