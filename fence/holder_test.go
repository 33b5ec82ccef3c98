package fence_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/distlock/lock/fence"
	_ "github.com/distlock/lock/filedriver"
)

// holderPut is the paused holder's write (internal/staleholder), to the
// resource server at URL with the key as resource (resource is "URL KEY"):
// a PUT through fence.Handler, refused with ErrStale only if the handler
// answers 409 naming a stale token.
func holderPut(ctx context.Context, resource string, token uint64, value string) error {
	url, key, _ := strings.Cut(resource, " ")
	code, body, err := put(ctx, url, key, token, value)
	switch {
	case err != nil:
		return err
	case code == http.StatusConflict && strings.Contains(body, "stale"):
		return staleStatus("status 409 " + strings.TrimSpace(body))
	case code != http.StatusOK:
		return fmt.Errorf("status %d %s", code, strings.TrimSpace(body))
	}
	return nil
}

// staleStatus is the handler's 409 refusal of a stale token, as the holder
// reports it: the status and the body, and matching fence.ErrStale.
type staleStatus string

func (s staleStatus) Error() string        { return string(s) }
func (s staleStatus) Is(target error) bool { return target == fence.ErrStale }
