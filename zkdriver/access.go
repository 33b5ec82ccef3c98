package zkdriver

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper takes any digest credentials: AddAuth with a wrong password
// succeeds and gives the session another identity, which only shows when a
// node's ACL is checked. So Open checks, in one request, that the session may
// do what locking needs under the root: create a node there with the driver's
// ACL (which the server also validates), and read it back. The request is a
// transaction that creates the node and then fails on purpose (a version check
// that cannot match), so nothing is ever written.

// probeName is the node the access check would create under the root. No key
// node has this name: escapeName escapes a leading '.'.
const probeName = ".distlock-access-check"

// impossibleVersion is a version no node created by the check can have (a new
// node has version 0).
const impossibleVersion = 1 << 30

// checkAccess reports whether the session may create nodes under the root with
// the driver's ACL and read them: nil if so, else the server's refusal
// (zk.ErrNoAuth, zk.ErrInvalidACL) or the failure of the request.
func (d *Driver) checkAccess(ctx context.Context) error {
	path := d.root + "/" + probeName
	res, err := call(d, ctx, func() ([]zk.MultiResponse, error) {
		return d.conn.Multi(
			&zk.CreateRequest{Path: path, Acl: d.acl, Flags: zk.FlagEphemeral},
			&zk.CheckVersionRequest{Path: path, Version: impossibleVersion},
		)
	}, nil)
	if len(res) == 2 {
		// The transaction always fails; what matters is which step refused.
		switch create, check := res[0].Error, res[1].Error; {
		case create != nil && !errors.Is(create, zk.ErrNodeExists):
			return fmt.Errorf("create %s: %w", path, create)
		case create == nil && errors.Is(check, zk.ErrBadVersion):
			return nil // created and read: only the version did not match
		case create == nil && check != nil:
			return fmt.Errorf("read %s: %w", path, check)
		}
	}
	switch {
	case err == nil:
		// A transaction meant to fail went through: delete what it made.
		_, err = call(d, ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) }, nil)
		return err
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
		// Only the check refused (someone else's probe may exist at once).
		return nil
	}
	return err
}

// accessError explains an error of Open's checks of the root. A refusal by the
// server's ACLs says which credentials the session presented (the user, never
// the password); others are returned as they are.
func (d *Driver) accessError(err error, user string) error {
	var who string
	switch {
	case user != "":
		who = fmt.Sprintf("digest user %q (is the password right?)", user)
	default:
		who = "no credentials (does the URL need user:password@?)"
	}
	switch {
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed):
		return fmt.Errorf("zkdriver: this session may not lock under %s: ZooKeeper refused it with %s: %w", d.root, who, err)
	case errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("zkdriver: ZooKeeper refused the ACL of the lock nodes under %s: %w", d.root, err)
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
		return fmt.Errorf("zkdriver: checking access under %s: %w", d.root, err)
	}
	return fmt.Errorf("zkdriver: %w", err)
}
