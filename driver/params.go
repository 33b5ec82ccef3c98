package driver

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Params reads a driver's URL query parameters: typed getters that record
// which parameters the driver knows, and a final Check that rejects every
// parameter no getter asked for, listing the accepted ones. Getters never
// fail the caller's flow: the first bad value is kept and Check returns it,
// so a driver reads its parameters in a straight line and checks once.
//
// Every error wraps ErrInvalidURL, names the parameter and gives an example
// of a good value; the value of a parameter marked secret (see Secret) never
// appears in an error.
type Params struct {
	// Unique rejects a parameter given more than once; without it a getter
	// reads the first value.
	Unique bool
	// NonEmpty rejects a parameter given with an empty value (name= or name).
	NonEmpty bool
	// Portable is ignored: the unknown-parameter error names the portable
	// parameters (PortableParams) itself.
	//
	// Deprecated: drivers no longer list them; Params keeps the one list.
	Portable string

	prefix string // "zkdriver", the start of every message
	q      url.Values
	known  []string // in the order the driver declared them
	secret map[string]bool
	err    error
}

// PortableParams are the URL parameters package lock reads (and removes)
// before a driver sees the URL, whatever the scheme: ttl, auto_refresh,
// prefix, open_timeout and close_timeout. Params names them in its
// unknown-parameter error, so that no driver keeps a copy of the list.
func PortableParams() []string {
	return []string{"ttl", "auto_refresh", "prefix", "open_timeout", "close_timeout"}
}

// NewParams returns the reader of q for the driver named name (the prefix of
// its messages). It does not modify q.
func NewParams(name string, q url.Values) *Params {
	return &Params{prefix: name, q: q, secret: map[string]bool{}}
}

// Errorf returns an error wrapping ErrInvalidURL, with the driver's prefix.
func (p *Params) Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidURL, p.prefix}, args...)...)
}

// fail keeps the first error.
func (p *Params) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Accept declares parameters the driver knows without reading them here
// (those it passes through to a client library, say).
func (p *Params) Accept(names ...string) {
	for _, n := range names {
		if !slices.Contains(p.known, n) {
			p.known = append(p.known, n)
		}
	}
}

// Secret declares secret parameters: accepted, and their values are never
// shown in an error.
func (p *Params) Secret(names ...string) {
	p.Accept(names...)
	for _, n := range names {
		p.secret[n] = true
	}
}

// Has reports whether the URL gives the parameter, and declares it known.
func (p *Params) Has(name string) bool {
	p.Accept(name)
	return p.q.Has(name)
}

// value returns the parameter's first value and whether it is given,
// declaring it known and checking Unique and NonEmpty.
func (p *Params) value(name string) (string, bool) {
	p.Accept(name)
	vs, ok := p.q[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	if p.Unique && len(vs) > 1 {
		p.fail(p.Errorf("parameter %s given %d times", name, len(vs)))
		return "", false
	}
	if p.NonEmpty && vs[0] == "" {
		p.fail(p.Errorf("parameter %s is empty", name))
		return "", false
	}
	return vs[0], true
}

// bad records that name's value v is not what is wanted ("a positive
// duration, such as 5s"), hiding v when name is secret.
func (p *Params) bad(name, v, want string) {
	if p.secret[name] {
		p.fail(p.Errorf("parameter %s is not %s", name, want))
		return
	}
	p.fail(p.Errorf("%s=%q is not %s", name, v, want))
}

// String returns the parameter's value, or def when it is not given.
func (p *Params) String(name, def string) string {
	if v, ok := p.value(name); ok {
		return v
	}
	return def
}

// Duration returns the parameter as a time.Duration within [lo, hi], or def
// when it is not given. want describes the range with an example, e.g. "a
// positive duration, such as 5s".
func (p *Params) Duration(name string, def, lo, hi time.Duration, want string) time.Duration {
	v, ok := p.value(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		p.bad(name, v, want)
		return def
	}
	return d
}

// Int returns the parameter as an int within [lo, hi], or def when it is not
// given; want describes the range ("an integer of at least 2").
func (p *Params) Int(name string, def, lo, hi int, want string) int {
	v, ok := p.value(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.bad(name, v, want)
		return def
	}
	return n
}

// Bool returns the parameter as strconv.ParseBool reads it, or def when it is
// not given.
func (p *Params) Bool(name string, def bool) bool {
	v, ok := p.value(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.bad(name, v, "true or false")
		return def
	}
	return b
}

// List returns the parameter's comma-separated items, or def when it is not
// given. An empty item (a,,b) is an error.
func (p *Params) List(name string, def []string) []string {
	v, ok := p.value(name)
	if !ok {
		return def
	}
	items := strings.Split(v, ",")
	if slices.Contains(items, "") {
		p.bad(name, v, "a comma-separated list without empty items, such as a,b")
		return def
	}
	return items
}

// All returns every value of a parameter that may be given more than once
// (server=a&server=b), or nil when it is not given; Unique does not apply,
// NonEmpty does.
func (p *Params) All(name string) []string {
	p.Accept(name)
	vs := p.q[name]
	if p.NonEmpty && slices.Contains(vs, "") {
		p.fail(p.Errorf("parameter %s is empty", name))
		return nil
	}
	return vs
}

// Refuse rejects a parameter the driver does not allow here, saying why: the
// message is "parameter NAME WHY", so why reads as a predicate ("needs TLS: use
// etcds://", "is refused: locks are written on the primary"). It records the
// error only when the URL gives the parameter, and does not add the parameter
// to the accepted list (Accept it too if it belongs there).
func (p *Params) Refuse(name, why string) {
	if p.q.Has(name) {
		p.fail(p.Errorf("parameter %s %s", name, why))
	}
}

// Err returns the first bad value a getter met, without the unknown-parameter
// check: for a driver that hands the parameters it does not read to a client
// library, which judges them itself (see Rest).
func (p *Params) Err() error { return p.err }

// Rest returns a copy of the query without the parameters declared so far:
// what a driver that reads some parameters hands on to its client library.
func (p *Params) Rest() url.Values {
	rest := url.Values{}
	for name, vs := range p.q {
		if !slices.Contains(p.known, name) {
			rest[name] = slices.Clone(vs)
		}
	}
	return rest
}

// Known returns the parameters declared so far, in declaration order.
func (p *Params) Known() []string { return slices.Clone(p.known) }

// Check returns the first bad value a getter met, or else an error naming
// every parameter of the URL that no getter declared, with the list of
// accepted ones; nil when all is well. Call it after every getter.
func (p *Params) Check() error {
	if p.err != nil {
		return p.err
	}
	var unknown []string
	for name := range p.q {
		if !slices.Contains(p.known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	portable := strings.Join(PortableParams(), ", ")
	accepted := "only the portable " + portable
	if len(p.known) > 0 {
		accepted = strings.Join(p.known, ", ") + " (and the portable " + portable + ")"
	}
	return p.Errorf("unknown parameter %s; accepted: %s", strings.Join(unknown, ", "), accepted)
}
