package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock/internal/testserver"
)

// madeUp are what a zero value printed as a fact looks like.
var madeUp = []string{"0001-01-01", "2562047h", "term 0", "token    0"}

func expectNoMadeUpValues(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range madeUp {
		if strings.Contains(out, bad) {
			t.Errorf("%s prints the made-up value %q:\n%s", what, bad, out)
		}
	}
}

// withHolders is a PostgreSQL URL with its holders=true parameter, which makes
// the driver record each holder's owner, token and start.
func withHolders(u string) string {
	if strings.Contains(u, "?") {
		return u + "&holders=true"
	}
	return u + "?holders=true"
}

// PostgreSQL without holders=true knows that a key is held and by which
// server session, but not since when nor its token: status says so instead
// of printing zero values, and --json leaves them out. With holders=true it
// prints them.
func TestStatusSaysUnknownForWhatTheBackendCannotKnow(t *testing.T) {
	pg := testserver.Postgres(t)
	key := "pg-status"
	h := holdWith(t, pg, key)
	out, stderr, status := runDistlock(t, nil, "status", "--url", pg, key)
	expectStatus(t, status, exitOK, stderr)
	expectNoMadeUpValues(t, "status", out)
	for _, want := range []string{"held     yes, exclusive", "since    unknown (needs holders=true)", "token    unknown (needs holders=true)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status without holders=true lacks %q:\n%s", want, out)
		}
	}
	out, stderr, status = runDistlock(t, nil, "status", "--url", pg, "--json", key)
	expectStatus(t, status, exitOK, stderr)
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if _, ok := raw["since"]; ok {
		t.Errorf("status --json has a since it cannot know: %s", out)
	}
	if _, ok := raw["token"]; ok {
		t.Errorf("status --json has a token it cannot know: %s", out)
	}
	if !strings.Contains(out, `"since"`) || !strings.Contains(out, "needs holders=true") {
		t.Errorf("status --json does not list since as unknown, with the reason: %s", out)
	}
	h.stdin.Close()
	expectStatus(t, h.wait(), 0, h.stderrText())

	// With holders=true the same backend records them.
	before := time.Now()
	ph := withHolders(pg)
	h = holdWith(t, ph, key)
	out, stderr, status = runDistlock(t, nil, "status", "--url", ph, key)
	expectStatus(t, status, exitOK, stderr)
	expectNoMadeUpValues(t, "status with holders=true", out)
	if strings.Contains(out, "unknown") || !strings.Contains(out, "since    "+before.UTC().Format("2006-01-02")) || !strings.Contains(out, "token    ") {
		t.Errorf("status with holders=true:\n%s", out)
	}
	var in infoJSON
	out, stderr, status = runDistlock(t, nil, "status", "--url", ph, "--json", key)
	expectStatus(t, status, exitOK, stderr)
	if err := json.Unmarshal([]byte(out), &in); err != nil || in.Since == nil || in.Since.Before(before.Add(-time.Second)) || in.Token == 0 || len(in.Unknown) != 0 {
		t.Errorf("status --json with holders=true: %s (%v)", out, err)
	}
	h.stdin.Close()
	expectStatus(t, h.wait(), 0, h.stderrText())
}

// The same for leader: without holders=true PostgreSQL cannot tell the
// leader's value, term or start.
func TestLeaderSaysUnknownForWhatTheBackendCannotKnow(t *testing.T) {
	pg := testserver.Postgres(t)
	name := "pg-leader"
	l := start(t, nil, "elect", "--url", pg, "--value", "addr-1", name, "--", "sh", "-c", tokenScript)
	l.expectLine(l.stdout, "ready")
	out, stderr, status := runDistlock(t, nil, "leader", "--url", pg, name)
	expectStatus(t, status, exitOK, stderr)
	expectNoMadeUpValues(t, "leader", out)
	// As the README shows it.
	if !regexp.MustCompile(`^` + name + `: owner postgres pid [0-9]+; value, term and since unknown \(needs holders=true\)\n$`).MatchString(out) {
		t.Errorf("leader without holders=true: %q", out)
	}
	out, stderr, status = runDistlock(t, nil, "leader", "--url", pg, "--json", name)
	expectStatus(t, status, exitOK, stderr)
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("leader --json: %v\n%s", err, out)
	}
	for _, f := range []string{"since", "token", "value"} {
		if _, ok := raw[f]; ok {
			t.Errorf("leader --json has a %s it cannot know: %s", f, out)
		}
	}
	if raw["elected"] != true || !strings.Contains(out, "needs holders=true") {
		t.Errorf("leader --json: %s", out)
	}
	l.stdin.Close()
	expectStatus(t, l.wait(), 0, l.stderrText())

	ph := withHolders(pg)
	l = start(t, nil, "elect", "--url", ph, "--value", "addr-2", name, "--", "sh", "-c", tokenScript)
	l.expectLine(l.stdout, "ready")
	out, stderr, status = runDistlock(t, nil, "leader", "--url", ph, name)
	expectStatus(t, status, exitOK, stderr)
	expectNoMadeUpValues(t, "leader with holders=true", out)
	if !strings.HasPrefix(out, name+": addr-2 (owner ") || strings.Contains(out, "unknown") || !strings.Contains(out, ", since "+time.Now().UTC().Format("2006-01-02")) {
		t.Errorf("leader with holders=true: %q", out)
	}
	var lj leaderJSON
	out, stderr, status = runDistlock(t, nil, "leader", "--url", ph, "--json", name)
	expectStatus(t, status, exitOK, stderr)
	if err := json.Unmarshal([]byte(out), &lj); err != nil || lj.Since == nil || lj.Token == 0 || lj.Value != "addr-2" || len(lj.Unknown) != 0 {
		t.Errorf("leader --json with holders=true: %s (%v)", out, err)
	}
	l.stdin.Close()
	expectStatus(t, l.wait(), 0, l.stderrText())
}

// A command the backend cannot serve is not bad usage: it exits
// exitUnsupported and names the URL parameter that enables it. With the
// parameter the same command works.
func TestCommandTheBackendCannotServeExitsUnsupportedNamingTheParameter(t *testing.T) {
	pg := testserver.Postgres(t)
	key := "unsupported-list"
	h := holdWith(t, withHolders(pg), key)
	for _, args := range [][]string{
		{"list", "--url", pg},
		{"list", "--url", pg, "--json", "unsupported-"},
		{"release", "--force", "--url", pg, key},
	} {
		out, stderr, status := runDistlock(t, nil, args...)
		if status != exitUnsupported || !strings.Contains(stderr, "holders=true") || out != "" {
			t.Errorf("distlock %q: exit status %d, want %d, and a message naming holders=true; stdout %q, stderr:\n%s", args, status, exitUnsupported, out, stderr)
		}
		if strings.Contains(stderr, "Flags of run") {
			t.Errorf("distlock %q prints the usage for a command the backend cannot serve:\n%s", args, stderr)
		}
	}
	// As the README shows it.
	_, stderr, _ := runDistlock(t, nil, "list", "--url", pg)
	if want := `distlock list: lock: list: not supported by this driver: pgadvisory: List needs the holders table (holders=true, WithHolders): an advisory lock records no owner, label or key` + "\n"; stderr != want {
		t.Errorf("list without holders=true printed\n%s\nwant\n%s", stderr, want)
	}
	out, stderr, status := runDistlock(t, nil, "list", "--url", withHolders(pg), "unsupported-")
	expectStatus(t, status, exitOK, stderr)
	if out != key+"\n" {
		t.Errorf("list with holders=true: %q", out)
	}
	h.stdin.Close()
	expectStatus(t, h.wait(), 0, h.stderrText())
}
