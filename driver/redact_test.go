package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestRedactReplacesEachSecretOnceLongestFirst(t *testing.T) {
	got := Redact("user x:xx@host token=x%78", "x", "xx", "x%78", "")
	if want := "user xxxxx:xxxxx@host token=xxxxx"; got != want {
		t.Fatalf("Redact = %q, want %q", got, want)
	}
}

func TestRedactErrorKeepsWhatTheErrorMatches(t *testing.T) {
	base := errors.New("dial redis://:hunter2@h: refused")
	err := RedactError(errors.Join(ErrInvalidURL, base), "hunter2")
	if msg := err.Error(); strings.Contains(msg, "hunter2") || !strings.Contains(msg, "redis://:xxxxx@h") {
		t.Fatalf("RedactError = %q, want the password replaced", msg)
	}
	if !errors.Is(err, ErrInvalidURL) || !errors.Is(err, base) {
		t.Fatalf("RedactError(%v) no longer matches its sentinel and cause", err)
	}
	if plain := RedactError(base, "other"); plain != base {
		t.Fatalf("RedactError without a secret in the message = %v, want the error itself", plain)
	}
}
