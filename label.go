package lock

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// A hold's label is what its holder publishes beside it on the backend, for
// Inspect and Leader: a small JSON object, so that an operator reading the
// backend directly can read it too:
//
//	{"owner":"web-3:4121","since":1764072000123}
//	{"owner":"web-3:4121","since":1764072000123,"value":"10.0.0.7:8080"}
//
// since is when the holder asked (or, for a leader, when it was elected), in
// Unix milliseconds by the holder's clock; value is a leader's published value.
type label struct {
	Owner string `json:"owner"`
	Since int64  `json:"since"`
	Value string `json:"value,omitempty"`
}

// maxOwnerName is the longest owner name WithOwnerName accepts, in bytes; a
// leader's value up to maxValue; escaped, both fit driver.MaxLabelLen.
const maxOwnerName = 256

// maxValue is the longest value Campaign and Proclaim accept, in bytes.
const maxValue = 1024

// encodeLabel writes the label without encoding/json's reflection.
func encodeLabel(owner string, since time.Time, value string) string {
	return string(appendLabel(make([]byte, 0, labelLen(owner, value)), owner, since, value))
}

// labelLen is at least the length of a label whose owner name and value
// need no escaping.
func labelLen(owner, value string) int { return 48 + len(owner) + len(value) }

func appendLabel(b []byte, owner string, since time.Time, value string) []byte {
	b = append(b, `{"owner":`...)
	b = appendJSONString(b, owner)
	b = append(b, `,"since":`...)
	b = strconv.AppendInt(b, since.UnixMilli(), 10)
	if value != "" {
		b = append(b, `,"value":`...)
		b = appendJSONString(b, value)
	}
	return append(b, '}')
}

// ownerAndLabel returns an acquire call's owner id (of sequence number seq,
// see owner.go) and label. It runs on every acquire, and what it returns the
// request keeps as long as it lives, so it costs what it can least: the owner
// id is a string of its own (32 bytes), and the label is shared with the
// Locker's other acquires of the same millisecond (see labelCache), so that
// many locks taken in a burst share one.
func (lk *Locker) ownerAndLabel(seq uint64, owner string, since time.Time, value string) (string, string) {
	var buf [ownerPrefixLen + 16]byte
	return string(lk.owners.appendOwner(buf[:0], seq)), lk.label(owner, since, value)
}

// labelCache is the label a Locker encoded last. A label depends on the
// owner name, the value and since only to the millisecond, so an acquire of
// the same millisecond with the same name and value reuses it: strings are
// immutable, and equal labels are interchangeable wherever they are kept.
type labelCache struct {
	ms           int64
	owner, value string
	label        string
}

// label returns the encoded label of an acquire, from the cache if it can.
func (lk *Locker) label(owner string, since time.Time, value string) string {
	ms := since.UnixMilli()
	if c := lk.labels.Load(); c != nil && c.ms == ms && c.owner == owner && c.value == value {
		return c.label
	}
	l := encodeLabel(owner, since, value)
	lk.labels.Store(&labelCache{ms: ms, owner: owner, value: value, label: l})
	return l
}

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// decodeLabel reads a label; a label that is not ours (written by another
// client of the backend) reads as an owner name of its own text.
func decodeLabel(s string) label {
	var l label
	if s == "" || s[0] != '{' || json.Unmarshal([]byte(s), &l) != nil {
		return label{Owner: s}
	}
	return l
}

// WithOwnerName sets the name a holder publishes beside its locks, which
// Inspect reports as Info.Owner and Leader reports as Leader.Owner: a host
// and process, a pod name. The default is "host:pid". At most 256 bytes of
// printable UTF-8; an empty name means the default.
func WithOwnerName(name string) Option {
	return func(o *options) {
		if err := checkText("owner name", name, maxOwnerName); err != nil {
			o.fail(err)
			return
		}
		o.ownerName = name
	}
}

// checkText checks a name or value published in a label.
func checkText(what, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s of %d bytes, longer than %d", ErrInvalidArgument, what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidArgument, what)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s contains the unprintable %U", ErrInvalidArgument, what, r)
		}
	}
	return nil
}

// defaultOwnerName is "host:pid", worked out once.
var defaultOwnerName = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
})

func (o options) owner() string {
	if o.ownerName != "" {
		return o.ownerName
	}
	return defaultOwnerName()
}
