package driver

import (
	"sort"
	"strings"
)

// Redact replaces every secret in msg with "xxxxx" in one pass, longest first,
// so a replacement is never searched again (a password "x" must not grow
// "xxxxx" without end, nor a shorter secret match inside a longer one's
// replacement). Empty secrets are ignored.
func Redact(msg string, secrets ...string) string {
	sorted := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" {
			sorted = append(sorted, s)
		}
	}
	if len(sorted) == 0 {
		return msg
	}
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	pairs := make([]string, 0, 2*len(sorted))
	for _, s := range sorted {
		pairs = append(pairs, s, "xxxxx")
	}
	return strings.NewReplacer(pairs...).Replace(msg)
}

// RedactError returns err with every secret removed from its message (see
// Redact), still matching what err matches with errors.Is and errors.As. It
// returns err itself when the message holds no secret.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := Redact(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
