package driver

import (
	"net/url"
	"strings"
)

// secretParams are the query parameters whose values are secrets in any
// driver's URL (matched without regard to case).
var secretParams = []string{"password", "passwd", "pass", "pwd", "secret", "token", "sslpassword", "sslkey", "key", "auth"}

// IsSecretParam tells whether a URL query parameter's value is a secret,
// redacted from every message: password, passwd, pass, pwd, secret, token,
// sslpassword, sslkey, key or auth, in any case.
func IsSecretParam(name string) bool {
	name = strings.ToLower(name)
	for _, s := range secretParams {
		if name == s {
			return true
		}
	}
	return false
}

// URLSecrets returns every form in which the secrets of the URL raw may appear
// in a message, for Redact and RedactError: its password and the values of
// its secret parameters (IsSecretParam), escaped and unescaped, also those of
// URLs nested in query values (a driver over several servers lists them so),
// also as the outer URL escapes them. raw need not parse: a password with an
// unescaped '/', '?', '#' or '@' is found as either reading of the URL would
// take it, and, when raw parses, as url.URL.String would print it. It is the
// one extractor every driver uses, so that no driver shows what another hides.
func URLSecrets(raw string) []string {
	out := urlSecretsNested(raw, 0)
	if u, err := url.Parse(raw); err == nil {
		out = parsedSecrets(out, u)
	}
	return out
}

// maxURLNesting bounds how deep URLs inside query values are searched.
const maxURLNesting = 3

func urlSecretsNested(raw string, depth int) []string {
	var out []string
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	// The userinfo ends at the last "@" of the authority; a password with an
	// unescaped "/", "?" or "#" moves that boundary, so try both readings.
	authority := rest
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	for _, r := range []string{authority, rest} {
		if at := strings.LastIndex(r, "@"); at >= 0 {
			if c := strings.Index(r[:at], ":"); c >= 0 {
				out = append(out, secretForms(r[:at][c+1:])...)
			}
		}
	}
	if q := strings.Index(raw, "?"); q >= 0 {
		query := raw[q+1:]
		if h := strings.Index(query, "#"); h >= 0 {
			query = query[:h]
		}
		// Go splits a query on "&" only; other parsers also on ";". Try both.
		for _, seps := range []string{"&", "&;"} {
			for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
				k, v, _ := strings.Cut(kv, "=")
				if uk, err := url.QueryUnescape(k); err == nil {
					k = uk
				}
				if IsSecretParam(k) {
					out = append(out, secretForms(v)...)
				}
				if depth < maxURLNesting {
					out = append(out, nestedSecrets(v, depth)...)
				}
			}
		}
	}
	return out
}

// nestedSecrets finds the secrets of a query value that is a URL, given raw or
// query-escaped, in the forms the outer URL may show them.
func nestedSecrets(v string, depth int) []string {
	var out []string
	for _, inner := range []string{v, queryUnescaped(v)} {
		if !strings.Contains(inner, "://") {
			continue
		}
		for _, x := range urlSecretsNested(inner, depth+1) {
			out = append(out, x, url.QueryEscape(x), url.PathEscape(x))
		}
	}
	return out
}

func queryUnescaped(s string) string {
	if un, err := url.QueryUnescape(s); err == nil {
		return un
	}
	return s
}

// parsedSecrets adds the password and secret parameters as url.Parse read them,
// in the forms URL.String prints them.
func parsedSecrets(secrets []string, u *url.URL) []string {
	if pw, ok := u.User.Password(); ok {
		secrets = append(secrets, secretForms(pw)...)
		if s := url.UserPassword("", pw).String(); len(s) > 1 {
			secrets = append(secrets, s[1:])
		}
	}
	for name, vs := range u.Query() {
		for _, v := range vs {
			if IsSecretParam(name) {
				secrets = append(secrets, secretForms(v)...)
			}
			secrets = append(secrets, nestedSecrets(v, 0)...)
		}
	}
	return secrets
}

// secretForms is a secret as given and in its escaped and unescaped forms.
func secretForms(s string) []string {
	if s == "" {
		return nil
	}
	out := []string{s, url.PathEscape(s), url.QueryEscape(s)}
	if un, err := url.PathUnescape(s); err == nil {
		out = append(out, un)
	}
	if un, err := url.QueryUnescape(s); err == nil {
		out = append(out, un)
	}
	return out
}
