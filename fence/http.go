package fence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/distlock/lock/driver"
)

// Header is the HTTP request header that carries a fencing token to a service
// that is itself the resource. Its value is the resource name, a semicolon and
// the token in decimal: "invoice:42;1234". The token is what follows the last
// semicolon, so a resource name may itself hold semicolons.
const Header = "Fencing-Token"

// ErrMalformedHeader is returned by ParseHeader for a Fencing-Token header
// that is repeated, has no semicolon, or whose token is not a decimal number.
// It matches lock.ErrInvalidArgument.
var ErrMalformedHeader = fmt.Errorf("%w: malformed %s header", driver.ErrInvalidArgument, Header)

// SetHeader sets h's Fencing-Token header to resource and token.
func SetHeader(h http.Header, resource string, token uint64) {
	h.Set(Header, resource+";"+strconv.FormatUint(token, 10))
}

// ParseHeader returns the resource and token of h's Fencing-Token header. ok is
// false, with a nil error, when h has none; err is set for a malformed one
// (ErrMalformedHeader), a token of 0 (ErrZeroToken) or a bad resource name
// (ErrInvalidResource).
func ParseHeader(h http.Header) (resource string, token uint64, ok bool, err error) {
	values := h.Values(Header)
	switch len(values) {
	case 0:
		return "", 0, false, nil
	case 1:
	default:
		return "", 0, true, fmt.Errorf("fence: %w: it appears %d times", ErrMalformedHeader, len(values))
	}
	v := values[0]
	i := strings.LastIndexByte(v, ';')
	if i < 0 {
		return "", 0, true, fmt.Errorf("fence: %w: want <resource>;<token>", ErrMalformedHeader)
	}
	resource, digits := v[:i], strings.TrimSpace(v[i+1:])
	// ParseUint alone would take "+1"; a token is digits only.
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return "", 0, true, fmt.Errorf("fence: %w: token %q is not a decimal number", ErrMalformedHeader, digits)
	}
	token, err = strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", 0, true, fmt.Errorf("fence: %w: token %q is out of range", ErrMalformedHeader, digits)
	}
	if err := checkArgs(resource, token); err != nil {
		return "", 0, true, err
	}
	return resource, token, true, nil
}

// Handler admits each request's fencing token with c before next runs, for a
// service that is itself the resource. It answers, in plain text, 428
// Precondition Required for a request without a Fencing-Token header, 400 Bad
// Request for a malformed one (or token 0), 409 Conflict for a stale token and
// 503 Service Unavailable when c fails otherwise, and next does not run then.
//
// Requests for the same resource run one at a time, from their Admit to the
// end of next, so an admitted request's write ends before a newer token is
// admitted; requests for different resources run in parallel. That order holds
// within one Handler: a resource served by several processes needs its check
// and write atomic in the store they share (SQL, for example), not here.
// A nil c or next panics, as http.Handle does for a nil handler: it is a
// programming error, and a Handler without a Checker would fence nothing.
func Handler(c Checker, next http.Handler) http.Handler {
	if c == nil || next == nil {
		panic("fence: Handler with a nil Checker or next handler")
	}
	return &handler{c: c, next: next}
}

type handler struct {
	c    Checker
	next http.Handler
	busy busyResources
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resource, token, ok, err := ParseHeader(r.Header)
	switch {
	case err != nil:
		plain(w, http.StatusBadRequest, err.Error())
		return
	case !ok:
		plain(w, http.StatusPreconditionRequired, "fence: the request has no "+Header+" header (<resource>;<token>)")
		return
	}
	release, err := h.busy.acquire(r.Context(), resource)
	if err != nil {
		plain(w, http.StatusServiceUnavailable, "fence: the request ended before its turn for resource "+strconv.Quote(resource))
		return
	}
	defer release()
	switch err := h.c.Admit(r.Context(), resource, token); {
	case errors.Is(err, ErrStale):
		plain(w, http.StatusConflict, "fence: resource "+strconv.Quote(resource)+": token "+
			strconv.FormatUint(token, 10)+" is stale: a newer holder has been admitted")
		return
	case errors.Is(err, driver.ErrInvalidArgument):
		plain(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		// The Checker's own error may describe its store; it stays on the server.
		plain(w, http.StatusServiceUnavailable, "fence: the fencing check for resource "+strconv.Quote(resource)+" failed; try again")
		return
	}
	h.next.ServeHTTP(w, r)
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
