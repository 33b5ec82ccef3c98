package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/distlock/lock/internal/testserver"
)

// jsonLines parses every line of stderr that starts with '{' as one JSON log
// record, failing the test on a line that does not parse.
func jsonLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// findRecord returns the first record with message msg.
func findRecord(recs []map[string]any, msg string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// With --log-level debug --log-format json the lock's life is on stderr as
// JSON lines: the acquisition and the release, with the key and backend.
func TestJSONLogsAtDebugShowTheLocksLife(t *testing.T) {
	u := fileURL(t.TempDir())
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--log-level", "debug", "--log-format", "json", "job", "--", "true")
	expectStatus(t, status, 0, stderr)
	recs := jsonLines(t, stderr)
	for _, msg := range []string{"distlock: lock acquired", "distlock: lock released"} {
		r := findRecord(recs, msg)
		if r == nil {
			t.Fatalf("no %q record; stderr:\n%s", msg, stderr)
		}
		if r["level"] != "DEBUG" || r["key"] != "job" || r["backend"] != "file" {
			t.Errorf("%q logged as %v, want level DEBUG, key job, backend file", msg, r)
		}
	}
}

// By default (--log-level warn) a run that goes well prints nothing, so cron
// mails nothing and scripts read a clean stderr.
func TestDefaultLogLevelPrintsNothingWhenAllGoesWell(t *testing.T) {
	_, stderr, status := runDistlock(t, nil, "run", "--url", fileURL(t.TempDir()), "job", "--", "true")
	expectStatus(t, status, 0, stderr)
	if stderr != "" {
		t.Errorf("a run that went well printed on stderr:\n%s", stderr)
	}
}

// A loss that stops the command is reported with its cause: in distlock's own
// message, and at Warn in the log.
func TestLossIsReportedWithItsCause(t *testing.T) {
	script := `trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.01; done`
	check := func(t *testing.T, h *proc, cause string) {
		t.Helper()
		h.expectLine(h.stdout, "terminated")
		expectStatus(t, h.wait(), exitLost, h.stderrText())
		stderr := h.stderrText()
		if !strings.Contains(stderr, `lost the lock "job" (cause: `+cause+")") {
			t.Errorf("stderr does not name the cause %s of the loss:\n%s", cause, stderr)
		}
		r := findRecord(jsonLines(t, stderr), "distlock: lock lost")
		if r == nil || r["level"] != "WARN" || r["cause"] != cause || r["key"] != "job" {
			t.Errorf("loss logged as %v, want WARN with cause %s and key job; stderr:\n%s", r, cause, stderr)
		}
	}
	t.Run("force released by an operator", func(t *testing.T) {
		u := fileURL(t.TempDir())
		h := start(t, nil, "run", "--url", u, "--log-format", "json", "--ttl", "300ms", "--grace", "200ms", "job", "--", "sh", "-c", script)
		h.expectLine(h.stdout, "ready")
		_, stderr, status := runDistlock(t, nil, "release", "--url", u, "--force", "job")
		expectStatus(t, status, exitOK, stderr)
		check(t, h, "force_released")
	})
	t.Run("redis server frozen past the TTL", func(t *testing.T) {
		srv := testserver.StartRedis(t)
		h := start(t, nil, "run", "--url", srv.URL(), "--log-format", "json", "--ttl", "1s", "--grace", "300ms", "job", "--", "sh", "-c", script)
		h.expectLine(h.stdout, "ready")
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Resume() }()
		check(t, h, "expired")
		if r := findRecord(jsonLines(t, h.stderrText()), "distlock: backend unreachable"); r == nil || r["level"] != "WARN" {
			t.Errorf("the frozen server was not logged as unreachable at WARN:\n%s", h.stderrText())
		}
	})
}

// A bad --log-level or --log-format is bad usage (64), named in the message.
func TestBadLogFlagsExit64WithAClearMessage(t *testing.T) {
	u := fileURL(t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--url", u, "--log-level", "loud", "k", "--", "true"}, `--log-level "loud": want debug, info, warn, error or off`},
		{[]string{"run", "--url", u, "--log-format", "xml", "k", "--", "true"}, `--log-format "xml": want text or json`},
		{[]string{"elect", "--url", u, "--log-level", "", "k", "--", "true"}, `--log-level "": want`},
	} {
		_, stderr, status := runDistlock(t, nil, tc.args...)
		if status != exitUsage || !strings.Contains(stderr, "distlock: "+tc.want) {
			t.Errorf("distlock %q: exit status %d, stderr:\n%s\nwant %d and %q", tc.args, status, stderr, exitUsage, tc.want)
		}
	}
}
