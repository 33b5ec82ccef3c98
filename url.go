package lock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
)

// Open returns a Locker for the backend the URL names, through the driver
// registered for its scheme (imported for its side effect, as database/sql drivers
// are). The portable parameters ttl, auto_refresh, prefix, open_timeout and
// close_timeout are read and removed before the driver parses the URL; they
// override the options given here. No error ever contains the URL's password.
//
// Open connects and checks that the backend answers and accepts the credentials,
// so a wrong address or password fails here rather than at the first Acquire. It
// honours ctx; when ctx has no deadline, it gives up after DefaultOpenTimeout (or
// the URL's open_timeout, which applies in any case) with an error matching
// ErrUnavailable or the backend's refusal.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	if err := checkContext(ctx, "open", ""); err != nil {
		return nil, err
	}
	secrets := driver.URLSecrets(rawURL)
	u, err := url.Parse(rawURL)
	// Every message is redacted in one pass at the end, so a short secret cannot
	// match inside a replacement.
	fail := func(err error) (*Locker, error) {
		return nil, &Error{Op: "open", Err: driver.RedactError(err, secrets...)}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the raw URL
		}
		return fail(fmt.Errorf("%w: %s", ErrInvalidURL, err.Error()))
	}
	if u.Scheme == "" {
		return fail(fmt.Errorf("%w: no scheme (want scheme://..., e.g. %s)", ErrInvalidURL, schemeExamples()))
	}
	scheme := strings.ToLower(u.Scheme)
	open, ok := driver.Lookup(scheme)
	if !ok {
		return fail(unknownSchemeError(scheme, driver.Schemes()))
	}
	cfg, p, err := portableParams(u)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", u, err))
	}
	all := append(append(opts[:len(opts):len(opts)], p.opts...), withScheme(scheme))
	if err := defaultOptions().apply(all).err; err != nil {
		return fail(err)
	}
	if p.openTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.openTimeout)
		defer cancel()
	} else if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultOpenTimeout)
		defer cancel()
	}
	d, err := open(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fail(fmt.Errorf("%s: %w", u, classify(err)))
	}
	lk := New(d, all...)
	if err := lk.validate(&lk.defaults); err != nil {
		_ = lk.Close()
		return fail(fmt.Errorf("%s: %w", u, err))
	}
	lk.name = redact(u.String(), secrets)
	return lk, nil
}

// urlParams are the portable parameters of a URL.
type urlParams struct {
	opts        []Option
	openTimeout time.Duration // zero: not given
}

// portableParams takes the portable layer's own query parameters out of u and
// turns them into options.
func portableParams(u *url.URL) (driver.Config, urlParams, error) {
	q := u.Query()
	var p urlParams
	cfg := driver.Config{}
	duration := func(name, example string) (time.Duration, bool, error) {
		v, ok := q[name]
		if !ok {
			return 0, false, nil
		}
		q.Del(name)
		d, err := time.ParseDuration(v[0])
		if err != nil || d <= 0 {
			return 0, false, fmt.Errorf("%w: %s=%q is not a positive duration such as %s", ErrInvalidURL, name, v[0], example)
		}
		return d, true, nil
	}
	if d, ok, err := duration("ttl", "30s"); err != nil {
		return cfg, p, err
	} else if ok {
		p.opts = append(p.opts, WithTTL(d))
	}
	if d, ok, err := duration("close_timeout", "5s"); err != nil {
		return cfg, p, err
	} else if ok {
		p.opts = append(p.opts, WithCloseTimeout(d))
	}
	if d, ok, err := duration("open_timeout", "10s"); err != nil {
		return cfg, p, err
	} else if ok {
		p.openTimeout = d
	}
	if v, ok := q["auto_refresh"]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return cfg, p, fmt.Errorf("%w: auto_refresh=%q is not true or false", ErrInvalidURL, v[0])
		}
		p.opts = append(p.opts, WithAutoRefresh(b))
		q.Del("auto_refresh")
	}
	if v, ok := q["prefix"]; ok {
		if v[0] == "" || !validPrefix(v[0]) {
			return cfg, p, fmt.Errorf("%w: prefix=%q must be non-empty valid UTF-8 without control characters", ErrInvalidURL, v[0])
		}
		cfg.Prefix = v[0]
		q.Del("prefix")
	}
	stripped := *u
	stripped.RawQuery = q.Encode()
	cfg.URL = &stripped
	return cfg, p, nil
}

func validPrefix(p string) bool {
	if validateKey(p) != nil {
		return false
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func schemeExamples() string {
	s := driver.Schemes()
	if len(s) == 0 {
		return "file:///var/lock/myapp"
	}
	return s[0] + "://..."
}

func redact(msg string, secrets []string) string { return driver.Redact(msg, secrets...) }

func driverName(d driver.Driver) string { return fmt.Sprintf("%T", d) }
