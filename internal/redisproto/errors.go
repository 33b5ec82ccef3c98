package redisproto

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
)

// transientCodes are the error codes with which a Redis server says it cannot
// serve a request now but may later: it is loading its data (LOADING), a
// Cluster slot is migrating or the cluster is failing over (TRYAGAIN,
// CLUSTERDOWN), a replica lost its primary (MASTERDOWN), the server became a
// replica in a failover and the client has not followed yet (READONLY), a
// script or module keeps it busy (BUSY), or too few replicas acknowledge
// writes (NOREPLICAS).
var transientCodes = []string{"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "BUSY", "NOREPLICAS"}

// IsTransient reports whether err is a failure that a later attempt may not
// meet: one of the transient server answers above, or the server could not be
// reached or did not answer (a network error, a timeout, an exhausted
// connection pool). Every other server answer is permanent: WRONGTYPE, NOAUTH,
// WRONGPASS, NOPERM, ERR, a NOSCRIPT that the EVAL fallback did not cure.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(re.Error(), " ")
		for _, c := range transientCodes {
			if code == c {
				return true
			}
		}
		return false
	}
	return driver.Unreachable(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// Classify marks a transient failure (IsTransient) with driver.ErrUnavailable,
// so that package lock retries it, and returns every other error unchanged.
func Classify(err error) error {
	if err == nil || errors.Is(err, driver.ErrUnavailable) || !IsTransient(err) {
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}
