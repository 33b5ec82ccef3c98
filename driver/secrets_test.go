package driver

import (
	"net/url"
	"strings"
	"testing"
)

// Every form in which a URL's secrets may reach a message is found, whether
// or not the URL parses, and nothing that is not a secret.
func TestURLSecretsFindsPasswordsAndSecretParamsInEveryForm(t *testing.T) {
	inner := "redis://:in%2Fner@h1:6379"
	for _, c := range []struct {
		raw      string
		want     []string // each must be found
		notFound []string // none may be
	}{
		{"redis://user:s3cret@host:6379/0", []string{"s3cret"}, []string{"user", "host"}},
		{"postgres://u:p%40ss@h/db", []string{"p%40ss", "p@ss"}, []string{"u", "db"}},
		// An unescaped '@' or '/' in the password: the raw URL does not parse
		// as meant, and both readings are covered.
		{"postgres://u:p@ss/x@h/db", []string{"p@ss/x"}, nil},
		{"zk://h:2181?Password=abc&sslKey=/k.pem&prefix=p", []string{"abc", "/k.pem"}, []string{"p"}},
		// A server list of URLs nested in query values, raw and escaped.
		{"redlock://?server=" + inner + "&server=" + url.QueryEscape(inner), []string{"in%2Fner", "in/ner"}, []string{"h1"}},
	} {
		got := URLSecrets(c.raw)
		for _, w := range c.want {
			if msg := Redact("error: "+w, got...); strings.Contains(msg, w) {
				t.Errorf("URLSecrets(%q) = %q misses %q", c.raw, got, w)
			}
		}
		for _, n := range c.notFound {
			for _, s := range got {
				if s == n {
					t.Errorf("URLSecrets(%q) = %q takes %q, which is no secret", c.raw, got, n)
				}
			}
		}
	}
	// A parsed URL printed again (url.URL.String escapes otherwise) is covered.
	u, _ := url.Parse("redis://:a%20b@h")
	if msg := Redact(u.String(), URLSecrets("redis://:a%20b@h")...); strings.Contains(msg, "a%20b") || strings.Contains(msg, "a b") {
		t.Errorf("the printed URL %q is redacted to %q", u.String(), msg)
	}
}

func TestSecretParamsAreMatchedWithoutRegardToCase(t *testing.T) {
	for _, n := range []string{"password", "PASSWORD", "sslpassword", "Token", "auth"} {
		if !IsSecretParam(n) {
			t.Errorf("IsSecretParam(%q) = false", n)
		}
	}
	for _, n := range []string{"ttl", "prefix", "user", "server"} {
		if IsSecretParam(n) {
			t.Errorf("IsSecretParam(%q) = true", n)
		}
	}
}
