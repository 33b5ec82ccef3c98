package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/fence"
	"github.com/distlock/lock/internal/fenceprops"
)

// failingChecker fails every Admit with an error that must stay on the server.
type failingChecker struct{}

func (failingChecker) Admit(context.Context, string, uint64) error {
	return errors.New("dial tcp 10.0.0.7:5432: secret-detail")
}

// Each refusal has its status and a plain-text body saying which, and next
// runs only for an admitted token.
func TestHandlerAnswersEachRefusalWithItsStatus(t *testing.T) {
	ran := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })
	m := fence.NewMemory()
	if err := m.Admit(context.Background(), "r", 10); err != nil {
		t.Fatal(err)
	}
	h := fence.Handler(m, next)
	cases := []struct {
		name   string
		header []string
		c      fence.Checker
		code   int
		body   string
	}{
		{"no header", nil, m, http.StatusPreconditionRequired, "no Fencing-Token header"},
		{"no semicolon", []string{"r"}, m, http.StatusBadRequest, "malformed"},
		{"not a number", []string{"r;ten"}, m, http.StatusBadRequest, "not a decimal"},
		{"signed", []string{"r;+11"}, m, http.StatusBadRequest, "not a decimal"},
		{"too large", []string{"r;18446744073709551616"}, m, http.StatusBadRequest, "out of range"},
		{"repeated", []string{"r;11", "r;12"}, m, http.StatusBadRequest, "2 times"},
		{"token 0", []string{"r;0"}, m, http.StatusBadRequest, "token 0"},
		{"empty resource", []string{";11"}, m, http.StatusBadRequest, "resource name is empty"},
		{"stale", []string{"r;9"}, m, http.StatusConflict, `resource "r": token 9 is stale`},
		{"checker fails", []string{"r;11"}, failingChecker{}, http.StatusServiceUnavailable, "fencing check for resource \"r\" failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ran = 0
			req := httptest.NewRequest(http.MethodPut, "/", nil)
			for _, v := range c.header {
				req.Header.Add(fence.Header, v)
			}
			w := httptest.NewRecorder()
			hh := h
			if c.c != m {
				hh = fence.Handler(c.c, next)
			}
			hh.ServeHTTP(w, req)
			if w.Code != c.code || !strings.Contains(w.Body.String(), c.body) {
				t.Fatalf("%d %q, want %d with %q", w.Code, w.Body.String(), c.code, c.body)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q, want text/plain", ct)
			}
			if strings.Contains(w.Body.String(), "secret-detail") {
				t.Fatalf("body %q shows the Checker's own error", w.Body.String())
			}
			if ran != 0 {
				t.Fatal("next ran for a refused request")
			}
		})
	}
	for _, tok := range []string{"10", "11", "11"} {
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		req.Header.Set(fence.Header, "r;"+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("token %s: %d %q, want 200", tok, w.Code, w.Body.String())
		}
	}
	if ran != 3 || m.Highest("r") != 11 {
		t.Fatalf("next ran %d times, highest %d; want 3 and 11", ran, m.Highest("r"))
	}
}

// SetHeader and ParseHeader agree, for resource names with semicolons too.
func TestSetHeaderAndParseHeaderRoundTrip(t *testing.T) {
	for _, resource := range []string{"invoice:42", "a;b;c", "ключ"} {
		h := http.Header{}
		fence.SetHeader(h, resource, 1<<63+5)
		r, tok, ok, err := fence.ParseHeader(h)
		if err != nil || !ok || r != resource || tok != 1<<63+5 {
			t.Fatalf("ParseHeader(SetHeader(%q)) = %q, %d, %v, %v", resource, r, tok, ok, err)
		}
	}
	if _, _, ok, err := fence.ParseHeader(http.Header{}); ok || err != nil {
		t.Fatalf("ParseHeader(no header) = %v, %v; want false, nil", ok, err)
	}
	h := http.Header{}
	h.Set(fence.Header, "r;x")
	if _, _, _, err := fence.ParseHeader(h); !errors.Is(err, fence.ErrMalformedHeader) || !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("ParseHeader(r;x) = %v, want ErrMalformedHeader", err)
	}
}

// Requests for one resource run one at a time from Admit to the end of next;
// others run beside them.
func TestHandlerRunsOneRequestPerResourceAtATime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entered, release := make(chan string, 4), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.Header.Get(fence.Header)
		<-release
	})
	srv := httptest.NewServer(fence.Handler(fence.NewMemory(), next))
	defer srv.Close()
	done := make(chan error, 3)
	send := func(resource string, token uint64) {
		code, body, err := put(ctx, srv.URL, resource, token, "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s;%d: %d %s", resource, token, code, body)
		}
		done <- err
	}
	go send("a", 1)
	if got := <-entered; got != "a;1" {
		t.Fatalf("first in next: %q", got)
	}
	go send("a", 2)
	go send("b", 1)
	if got := <-entered; got != "b;1" {
		t.Fatalf("while a;1 runs, %q entered next; want b;1", got)
	}
	select {
	case got := <-entered:
		t.Fatalf("%q entered next while a;1 ran", got)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if got := <-entered; got != "a;2" {
		t.Fatalf("after a;1: %q", got)
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestHandlerConcurrentWritersEndWithTheLargestToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		rs := newResourceServer(t)
		s := fenceprops.Store{
			Write: func(ctx context.Context, a fenceprops.Attempt) error {
				token := a.Token
				code, body, err := put(ctx, rs.URL, "r", token, a.Value)
				switch {
				case err != nil:
					return err
				case code == http.StatusConflict:
					return &fence.StaleError{Resource: "r", Token: token}
				case code != http.StatusOK:
					return fmt.Errorf("%d %s", code, body)
				}
				return nil
			},
			Read: func(context.Context) (string, error) { return rs.stored(), nil },
		}
		if _, err := fenceprops.ConcurrentWriters(ctx, s, 24, 24); err != nil {
			t.Fatal(err)
		}
		rs.Close()
	}
}
