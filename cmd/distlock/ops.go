package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/distlock/lock"
)

// exitNone is the status of status, leader and release --force when there is
// no holder, leader or lock to speak of (as systemctl status reports an
// inactive unit).
const exitNone = 3

// opsTimeout bounds one inspection or operator call.
const opsTimeout = 30 * time.Second

// opsCommand is a parsed inspection or operator command line.
type opsCommand struct {
	name    string
	url     string
	json    bool
	force   bool
	watch   bool
	args    []string
	stdout  io.Writer
	stderr  io.Writer
	nargs   [2]int // how many arguments: at least, at most
	argName string
}

func (c *opsCommand) parse(args []string, extra func(*flag.FlagSet)) (status int, ok bool) {
	fs := flag.NewFlagSet("distlock "+c.name, flag.ContinueOnError)
	fs.StringVar(&c.url, "url", "", "backend URL")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if extra != nil {
		extra(fs)
	}
	if status, ok := parseFlags(fs, args, c.stdout, c.stderr); !ok {
		return status, false
	}
	c.args = fs.Args()
	if n := len(c.args); n < c.nargs[0] || n > c.nargs[1] {
		return usageError(c.stderr, fs.Name(), "want %s", c.argName), false
	}
	if c.url == "" {
		c.url = defaultURL()
	}
	return 0, true
}

// open opens the backend, or reports why not and returns the exit status.
func (c *opsCommand) open() (*lock.Locker, int) {
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	defer cancel()
	lk, err := lock.Open(ctx, c.url)
	if err != nil {
		return nil, c.fail(err)
	}
	return lk, 0
}

// fail reports err and returns its exit status: bad usage for a bad URL, key
// or argument; exitUnsupported for a command the backend cannot serve (the
// driver's error says why, and which URL parameter enables it where one
// does); exitUnavailable otherwise.
func (c *opsCommand) fail(err error) int {
	switch {
	case errors.Is(err, lock.ErrUnsupported):
		fmt.Fprintf(c.stderr, "distlock %s: %v\n", c.name, err)
		return exitUnsupported
	case errors.Is(err, lock.ErrInvalidURL), errors.Is(err, lock.ErrUnknownScheme), errors.Is(err, lock.ErrInvalidArgument),
		errors.Is(err, lock.ErrInvalidKey):
		return usageError(c.stderr, "distlock "+c.name, "%v", err)
	default:
		fmt.Fprintf(c.stderr, "distlock %s: %v\n", c.name, err)
		return exitUnavailable
	}
}

func (c *opsCommand) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// infoJSON is status's --json output.
type infoJSON struct {
	Key     string     `json:"key"`
	Held    bool       `json:"held"`
	Shared  bool       `json:"shared,omitempty"`
	Holders int        `json:"holders"`
	Permits int        `json:"permits,omitempty"`
	Token   uint64     `json:"token,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	Owners  []string   `json:"owners,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
	Waiters int        `json:"waiters"`
	// Unknown names the fields above that the backend cannot tell (left
	// out, never zero), and UnknownReason says why.
	Unknown       []string `json:"unknown,omitempty"`
	UnknownReason string   `json:"unknown_reason,omitempty"`
}

// unknownInfo names the fields of in that the backend left zero because it
// cannot know them: the start of a held key's holding (every holder distlock
// knows of records one), and its token where the backend has tokens.
func unknownInfo(in lock.Info, fencing bool) []string {
	var unknown []string
	if in.Held && in.Since.IsZero() {
		unknown = append(unknown, "since")
	}
	if in.Held && fencing && in.Token == 0 {
		unknown = append(unknown, "token")
	}
	return unknown
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// status is "distlock status KEY".
func status(args []string, stdout, stderr io.Writer) int {
	c := &opsCommand{name: "status", stdout: stdout, stderr: stderr, nargs: [2]int{1, 1}, argName: "KEY"}
	if st, ok := c.parse(args, nil); !ok {
		return st
	}
	lk, st := c.open()
	if lk == nil {
		return st
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	defer cancel()
	in, err := lk.Inspect(ctx, c.args[0])
	if err != nil {
		return c.fail(err)
	}
	unknown := unknownInfo(in, lk.Capabilities().Fencing)
	if c.json {
		j := infoJSON{Key: in.Key, Held: in.Held, Shared: in.Shared, Holders: in.Holders, Permits: in.Permits, Token: in.Token,
			Owner: in.Owner, Owners: in.Owners, Since: timePtr(in.Since), Expires: timePtr(in.Expires), Waiters: in.Waiters, Unknown: unknown}
		if len(unknown) > 0 {
			j.UnknownReason = unknownReason(c.url)
		}
		c.printJSON(j)
	} else {
		printInfo(stdout, in, unknown, unknownText(c.url), time.Now())
	}
	if !in.Held {
		return exitNone
	}
	return exitOK
}

// printInfo prints in as status does; the fields named in unknown are
// printed as unknownText.
func printInfo(w io.Writer, in lock.Info, unknown []string, unknownText string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "key\t%s\n", in.Key)
	kind := "exclusive"
	switch {
	case !in.Held:
		fmt.Fprintf(tw, "held\tno\n")
	case in.Permits > 0:
		kind = fmt.Sprintf("%d of %d permits", in.Holders, in.Permits)
	case in.Shared:
		kind = fmt.Sprintf("shared by %d", in.Holders)
	}
	if in.Held {
		fmt.Fprintf(tw, "held\tyes, %s\n", kind)
		for _, o := range in.Owners {
			fmt.Fprintf(tw, "owner\t%s\n", o)
		}
		if slices.Contains(unknown, "since") {
			fmt.Fprintf(tw, "since\t%s\n", unknownText)
		} else {
			fmt.Fprintf(tw, "since\t%s (%s ago)\n", in.Since.Format(time.RFC3339), now.Sub(in.Since).Round(time.Second))
		}
		if !in.Expires.IsZero() {
			fmt.Fprintf(tw, "expires\t%s (in %s, unless refreshed)\n", in.Expires.Format(time.RFC3339), in.Expires.Sub(now).Round(time.Millisecond))
		} else {
			fmt.Fprintf(tw, "expires\tnever (held as long as its holder's session)\n")
		}
	}
	switch {
	case slices.Contains(unknown, "token"):
		fmt.Fprintf(tw, "token\t%s\n", unknownText)
	case in.Token > 0:
		fmt.Fprintf(tw, "token\t%d\n", in.Token)
	}
	if in.Waiters >= 0 {
		fmt.Fprintf(tw, "waiters\t%d\n", in.Waiters)
	} else {
		fmt.Fprintf(tw, "waiters\tunknown on this backend\n")
	}
}

// list is "distlock list [PREFIX]".
func list(args []string, stdout, stderr io.Writer) int {
	c := &opsCommand{name: "list", stdout: stdout, stderr: stderr, nargs: [2]int{0, 1}, argName: "at most one PREFIX"}
	if st, ok := c.parse(args, nil); !ok {
		return st
	}
	prefix := ""
	if len(c.args) == 1 {
		prefix = c.args[0]
	}
	lk, st := c.open()
	if lk == nil {
		return st
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	defer cancel()
	keys, err := lk.List(ctx, prefix)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		if keys == nil {
			keys = []string{}
		}
		c.printJSON(keys)
	} else {
		for _, k := range keys {
			fmt.Fprintln(stdout, k)
		}
	}
	return exitOK
}

// forceRelease is "distlock release --force KEY".
func forceRelease(args []string, stdout, stderr io.Writer) int {
	c := &opsCommand{name: "release", stdout: stdout, stderr: stderr, nargs: [2]int{1, 1}, argName: "KEY"}
	if st, ok := c.parse(args, func(fs *flag.FlagSet) { fs.BoolVar(&c.force, "force", false, "free the key whoever holds it") }); !ok {
		return st
	}
	if !c.force {
		return usageError(stderr, "distlock release", "only --force is supported: it frees KEY whoever holds it (the holder's lock is lost, and the next holder's token fences it out); a holder releases its own lock itself")
	}
	lk, st := c.open()
	if lk == nil {
		return st
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	defer cancel()
	key := c.args[0]
	switch err := lk.ForceRelease(ctx, key); {
	case errors.Is(err, lock.ErrNotHeld):
		fmt.Fprintf(stderr, "distlock release: %q is not held\n", key)
		return exitNone
	case err != nil:
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "released %q\n", key)
	return exitOK
}

// leaderJSON is leader's --json output.
type leaderJSON struct {
	Name    string     `json:"name"`
	Elected bool       `json:"elected"`
	Value   string     `json:"value,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	Token   uint64     `json:"token,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	// Unknown and UnknownReason: as in infoJSON.
	Unknown       []string `json:"unknown,omitempty"`
	UnknownReason string   `json:"unknown_reason,omitempty"`
}

// unknownLeader names the fields of l that the backend left zero because it
// cannot know them. The value and the start come from what the leader
// recorded, which always has a start: without one neither is known (an
// empty value is a value).
func unknownLeader(l lock.Leader, fencing bool) []string {
	var unknown []string
	if !l.Elected {
		return nil
	}
	if l.Since.IsZero() {
		unknown = append(unknown, "value")
	}
	if fencing && l.Token == 0 {
		unknown = append(unknown, "token")
	}
	if l.Since.IsZero() {
		unknown = append(unknown, "since")
	}
	return unknown
}

func (c *opsCommand) printLeader(l lock.Leader, fencing bool) {
	unknown := unknownLeader(l, fencing)
	if c.json {
		j := leaderJSON{Name: l.Name, Elected: l.Elected, Value: l.Value, Owner: l.Owner, Token: l.Token, Since: timePtr(l.Since), Unknown: unknown}
		if len(unknown) > 0 {
			j.UnknownReason = unknownReason(c.url)
		}
		enc := json.NewEncoder(c.stdout) // one line per change under --watch
		_ = enc.Encode(j)
		return
	}
	if !l.Elected {
		fmt.Fprintf(c.stdout, "%s: no leader\n", l.Name)
		return
	}
	known := []string{"owner " + l.Owner}
	if fencing && l.Token > 0 {
		known = append(known, fmt.Sprintf("term %d", l.Token))
	}
	if !l.Since.IsZero() {
		known = append(known, "since "+l.Since.Format(time.RFC3339))
	}
	detail := strings.Join(known, ", ")
	if len(unknown) > 0 {
		names := slices.Clone(unknown)
		for i, n := range names {
			if n == "token" {
				names[i] = "term"
			}
		}
		detail += "; " + andList(names) + " " + unknownText(c.url)
	}
	if slices.Contains(unknown, "value") {
		fmt.Fprintf(c.stdout, "%s: %s\n", l.Name, detail)
		return
	}
	fmt.Fprintf(c.stdout, "%s: %s (%s)\n", l.Name, l.Value, detail)
}

// andList joins words as English does: "a", "a and b", "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// leader is "distlock leader NAME [--watch]".
func leader(args []string, stdout, stderr io.Writer) int {
	c := &opsCommand{name: "leader", stdout: stdout, stderr: stderr, nargs: [2]int{1, 1}, argName: "NAME"}
	if st, ok := c.parse(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&c.watch, "watch", false, "print every change of leader until interrupted")
	}); !ok {
		return st
	}
	lk, st := c.open()
	if lk == nil {
		return st
	}
	defer lk.Close()
	name := c.args[0]
	fencing := lk.Capabilities().Fencing
	if !c.watch {
		ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
		defer cancel()
		l, err := lk.Leader(ctx, name)
		switch {
		case errors.Is(err, lock.ErrNoLeader):
			c.printLeader(lock.Leader{Name: name}, fencing)
			return exitNone
		case err != nil:
			return c.fail(err)
		}
		c.printLeader(l, fencing)
		return exitOK
	}
	// Probe once, so that a backend that cannot tell is an error, not silence.
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	_, err := lk.Leader(ctx, name)
	cancel()
	if err != nil && !errors.Is(err, lock.ErrNoLeader) {
		return c.fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), forwarded...)
	defer stop()
	for l := range lk.Observe(ctx, name) {
		c.printLeader(l, fencing)
	}
	if ctx.Err() == nil {
		fmt.Fprintf(stderr, "distlock leader: stopped watching %q\n", name)
		return exitUnavailable
	}
	return exitOK
}
