package fence_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/distlock/lock/fence"
)

// resourceServer is a service that is itself the resource: a PUT stores the
// body, a GET returns it, behind fence.Handler over a Memory.
type resourceServer struct {
	*httptest.Server
	mu    sync.Mutex
	value string
}

func newResourceServer(t *testing.T) *resourceServer {
	rs := &resourceServer{}
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rs.mu.Lock()
		rs.value = string(b)
		rs.mu.Unlock()
	})
	rs.Server = httptest.NewServer(fence.Handler(fence.NewMemory(), store))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *resourceServer) stored() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.value
}

// put sends value with the fencing header (none if resource is empty) and
// returns the status and body.
func put(ctx context.Context, url, resource string, token uint64, value string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(value))
	if err != nil {
		return 0, "", err
	}
	if resource != "" {
		fence.SetHeader(req.Header, resource, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
