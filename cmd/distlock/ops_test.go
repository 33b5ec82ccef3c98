package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tokenScript prints ready and the token, then holds until its standard
// input closes.
const tokenScript = `echo "ready $DISTLOCK_TOKEN"; read line; true`

// holdWith starts distlock run holding key on u, and waits until it holds.
func holdWith(t *testing.T, u, key string, args ...string) *proc {
	t.Helper()
	argv := append([]string{"run", "--url", u}, args...)
	p := start(t, nil, append(argv, key, "--", "sh", "-c", tokenScript)...)
	p.expectLine(p.stdout, "ready")
	return p
}

// eventually runs distlock with args until check accepts its output, failing
// after the watchdog.
func eventually(t *testing.T, what string, check func(stdout string, status int) bool, args ...string) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for {
		out, stderr, status := runDistlock(t, nil, args...)
		if check(out, status) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("distlock %q: no %s within %v; last stdout:\n%s\nstderr:\n%s", args, what, watchdog, out, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStatusShowsTheHolderAsTextAndJSON(t *testing.T) {
	u := fileURL(t.TempDir())
	out, stderr, status := runDistlock(t, nil, "status", "--url", u, "job")
	expectStatus(t, status, exitNone, stderr)
	if !strings.Contains(out, "held") || !strings.Contains(out, "no") {
		t.Fatalf("status of a free key:\n%s", out)
	}

	before := time.Now()
	h := holdWith(t, u, "job")
	owner := ":" + strconv.Itoa(h.cmd.Process.Pid) // host:pid of the distlock run
	out, stderr, status = runDistlock(t, nil, "status", "--url", u, "job")
	expectStatus(t, status, exitOK, stderr)
	for _, want := range []string{"key      job", "held     yes, exclusive", "owner    ", owner, "token    1", "expires  never", "waiters  0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	// A second run waits: status counts it.
	w := start(t, nil, "run", "--url", u, "job", "--", "sh", "-c", tokenScript)
	var in infoJSON
	eventually(t, "waiter", func(out string, status int) bool {
		in = infoJSON{}
		return status == exitOK && json.Unmarshal([]byte(out), &in) == nil && in.Waiters == 1
	}, "status", "--url", u, "--json", "job")
	if in.Key != "job" || !in.Held || in.Shared || in.Holders != 1 || in.Token != 1 || !strings.HasSuffix(in.Owner, owner) ||
		len(in.Owners) != 1 || in.Expires != nil || in.Since == nil || in.Since.Before(before.Add(-time.Second)) || in.Since.After(time.Now()) {
		t.Errorf("status --json: %+v", in)
	}
	h.stdin.Close()
	expectStatus(t, h.wait(), 0, h.stderrText())
	w.expectLine(w.stdout, "ready 2")
	w.stdin.Close()
	expectStatus(t, w.wait(), 0, w.stderrText())
}

func TestStatusShowsSharedAndPermitHolders(t *testing.T) {
	u := fileURL(t.TempDir())
	for _, args := range [][]string{{"--shared"}, {"--permits", "3"}} {
		key := strings.TrimPrefix(args[0], "--")
		a, b := holdWith(t, u, key, args...), holdWith(t, u, key, args...)
		out, stderr, status := runDistlock(t, nil, "status", "--url", u, key)
		expectStatus(t, status, exitOK, stderr)
		want := "shared by 2"
		if key == "permits" {
			want = "2 of 3 permits"
		}
		if !strings.Contains(out, want) || strings.Count(out, "owner") != 2 {
			t.Errorf("status of %s holders:\n%s\nwant %q and two owners", key, out, want)
		}
		for _, p := range []*proc{a, b} {
			p.stdin.Close()
			expectStatus(t, p.wait(), 0, p.stderrText())
		}
	}
}

func TestListPrintsTheHeldKeysUnderAPrefix(t *testing.T) {
	u := fileURL(t.TempDir())
	var holders []*proc
	for _, k := range []string{"jobs/b", "jobs/a", "other"} {
		holders = append(holders, holdWith(t, u, k))
	}
	out, stderr, status := runDistlock(t, nil, "list", "--url", u, "jobs/")
	expectStatus(t, status, exitOK, stderr)
	if out != "jobs/a\njobs/b\n" {
		t.Errorf("list jobs/:\n%s", out)
	}
	out, stderr, status = runDistlock(t, nil, "list", "--url", u)
	expectStatus(t, status, exitOK, stderr)
	if out != "jobs/a\njobs/b\nother\n" {
		t.Errorf("list:\n%s", out)
	}
	out, stderr, status = runDistlock(t, nil, "list", "--url", u, "--json", "jobs/")
	expectStatus(t, status, exitOK, stderr)
	var keys []string
	if err := json.Unmarshal([]byte(out), &keys); err != nil || strings.Join(keys, ",") != "jobs/a,jobs/b" {
		t.Errorf("list --json jobs/: %q (%v)", out, err)
	}
	for _, p := range holders {
		p.stdin.Close()
		expectStatus(t, p.wait(), 0, p.stderrText())
	}
	out, stderr, status = runDistlock(t, nil, "list", "--url", u, "--json")
	expectStatus(t, status, exitOK, stderr)
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json with nothing held: %q", out)
	}
}

// An operator's release --force frees the key at once; the evicted run
// learns at its next check that its lock was forced away, stops its command
// and exits 74; the next holder's token is larger.
func TestReleaseForceEvictsARunWhichStopsItsCommand(t *testing.T) {
	u := fileURL(t.TempDir())
	_, stderr, status := runDistlock(t, nil, "release", "--url", u, "--force", "job")
	expectStatus(t, status, exitNone, stderr)
	_, stderr, status = runDistlock(t, nil, "release", "--url", u, "job")
	expectStatus(t, status, exitUsage, stderr)

	script := `trap 'echo terminated; exit 0' TERM; echo "ready $DISTLOCK_TOKEN"; while :; do sleep 0.01; done`
	h := start(t, nil, "run", "--url", u, "--ttl", "300ms", "--grace", "200ms", "job", "--", "sh", "-c", script)
	h.expectLine(h.stdout, "ready 1")
	out, stderr, status := runDistlock(t, nil, "release", "--url", u, "--force", "job")
	expectStatus(t, status, exitOK, stderr)
	if !strings.Contains(out, `released "job"`) {
		t.Errorf("release --force printed %q", out)
	}
	// The key is free at once, before the evicted run notices.
	n := holdWith(t, u, "job", "--no-wait")
	h.expectLine(h.stdout, "terminated")
	expectStatus(t, h.wait(), exitLost, h.stderrText())
	if e := h.stderrText(); !strings.Contains(e, "lost the lock") || !strings.Contains(e, "force-released") {
		t.Errorf("the evicted run's stderr does not name the forced release:\n%s", e)
	}
	// The evicted run's exit left the new holder's lock alone.
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "job", "--", "true")
	expectStatus(t, status, exitHeld, stderr)
	n.stdin.Close()
	expectStatus(t, n.wait(), 0, n.stderrText())
	out, stderr, status = runDistlock(t, nil, "run", "--url", u, "job", "--", "sh", "-c", `echo "token $DISTLOCK_TOKEN"`)
	expectStatus(t, status, 0, stderr)
	if out != "token 3\n" {
		t.Errorf("the run after the new holder printed %q, want token 3", out)
	}
}

func TestLeaderShowsAndWatchesTheLeader(t *testing.T) {
	u := fileURL(t.TempDir())
	out, stderr, status := runDistlock(t, nil, "leader", "--url", u, "jobs")
	expectStatus(t, status, exitNone, stderr)
	if out != "jobs: no leader\n" {
		t.Errorf("leader with no campaign: %q", out)
	}

	watch := start(t, nil, "leader", "--url", u, "--watch", "--json", "jobs")
	next := func(want leaderJSON) {
		t.Helper()
		select {
		case line, ok := <-watch.stdout:
			var got leaderJSON
			if !ok || json.Unmarshal([]byte(line), &got) != nil {
				t.Fatalf("leader --watch printed %q (open %v), want %+v; stderr:\n%s", line, ok, want, watch.stderrText())
			}
			if got.Name != want.Name || got.Elected != want.Elected || got.Value != want.Value || got.Token != want.Token || got.Elected != (got.Since != nil) {
				t.Fatalf("leader --watch printed %q, want %+v", line, want)
			}
		case <-time.After(watchdog):
			t.Fatalf("leader --watch printed nothing; want %+v; stderr:\n%s", want, watch.stderrText())
		}
	}
	next(leaderJSON{Name: "jobs"})

	for i, v := range []string{"a", "b"} {
		term := uint64(i + 1)
		l := start(t, nil, "elect", "--url", u, "--value", v, "jobs", "--", "sh", "-c", tokenScript)
		l.expectLine(l.stdout, "ready")
		next(leaderJSON{Name: "jobs", Elected: true, Value: v, Token: term})
		out, stderr, status := runDistlock(t, nil, "leader", "--url", u, "jobs")
		expectStatus(t, status, exitOK, stderr)
		want := fmt.Sprintf("jobs: %s (owner ", v)
		if !strings.HasPrefix(out, want) || !strings.Contains(out, fmt.Sprintf(":%d, term %d, since ", l.cmd.Process.Pid, term)) {
			t.Errorf("leader printed %q, want %s... with its pid and term %d", out, want, term)
		}
		l.stdin.Close() // the command ends: the leader resigns
		expectStatus(t, l.wait(), 0, l.stderrText())
		next(leaderJSON{Name: "jobs"})
	}
	if err := watch.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, watch.wait(), exitOK, watch.stderrText())
}
