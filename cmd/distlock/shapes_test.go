package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSharedRunsHoldTogetherAndExcludeAnExclusiveRun(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	r1 := start(t, nil, "run", "--url", u, "--shared", "catalog", "--", "sh", "-c", holdScript)
	r1.expectLine(r1.stdout, "ready")
	// A second reader needs no wait: --no-wait would fail if r1 excluded it.
	r2 := start(t, nil, "run", "--url", u, "--shared", "--no-wait", "catalog", "--", "sh", "-c", holdScript)
	r2.expectLine(r2.stdout, "ready")

	marker := filepath.Join(dir, "wrote")
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--no-wait", "catalog", "--", "touch", marker)
	expectStatus(t, status, exitHeld, stderr)
	if fileExists(marker) {
		t.Fatal("an exclusive run ran beside two --shared runs")
	}

	for _, r := range []*proc{r1, r2} {
		r.stdin.Close()
		expectStatus(t, r.wait(), 0, r.stderrText())
	}
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--no-wait", "catalog", "--", "touch", marker)
	expectStatus(t, status, 0, stderr)
	if !fileExists(marker) {
		t.Fatal("the exclusive run did not run once the readers were done")
	}
}

func TestExclusiveRunExcludesSharedRuns(t *testing.T) {
	u := fileURL(t.TempDir())
	w := start(t, nil, "run", "--url", u, "catalog", "--", "sh", "-c", holdScript)
	w.expectLine(w.stdout, "ready")
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--shared", "--no-wait", "catalog", "--", "true")
	expectStatus(t, status, exitHeld, stderr)
	w.stdin.Close()
	expectStatus(t, w.wait(), 0, w.stderrText())
}

// Once an exclusive run waits, a --shared run that comes after it waits behind
// it rather than joining the readers (the file backend's writer preference).
func TestWaitingExclusiveRunHoldsBackLaterSharedRuns(t *testing.T) {
	u := fileURL(t.TempDir())
	r := start(t, nil, "run", "--url", u, "--shared", "catalog", "--", "sh", "-c", holdScript)
	r.expectLine(r.stdout, "ready")
	w := start(t, nil, "run", "--url", u, "--verbose", "catalog", "--", "sh", "-c", holdScript)
	w.expectLine(w.stderr, "waiting for the lock")

	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--shared", "--no-wait", "catalog", "--", "true")
	expectStatus(t, status, exitHeld, stderr)

	r.stdin.Close()
	expectStatus(t, r.wait(), 0, r.stderrText())
	w.expectLine(w.stdout, "ready")
	w.stdin.Close()
	expectStatus(t, w.wait(), 0, w.stderrText())
}

func TestPermitsAdmitNRunsAndNoMore(t *testing.T) {
	dir := t.TempDir()
	u := fileURL(dir)
	var runs []*proc
	for i := 0; i < 2; i++ {
		p := start(t, nil, "run", "--url", u, "--permits", "2", "--no-wait", "exports", "--", "sh", "-c", holdScript)
		p.expectLine(p.stdout, "ready")
		runs = append(runs, p)
	}
	marker := filepath.Join(dir, "third")
	_, stderr, status := runDistlock(t, nil, "run", "--url", u, "--permits", "2", "--no-wait", "exports", "--", "touch", marker)
	expectStatus(t, status, exitHeld, stderr)

	// Another number of permits on the same key is a mistake, not a wait.
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--permits", "3", "--no-wait", "exports", "--", "touch", marker)
	expectStatus(t, status, exitUsage, stderr)
	if !strings.Contains(stderr, "permits") {
		t.Errorf("stderr does not name the permits mismatch:\n%s", stderr)
	}
	if fileExists(marker) {
		t.Fatal("a third run ran beside two holders of a semaphore of 2")
	}

	runs[0].stdin.Close()
	expectStatus(t, runs[0].wait(), 0, runs[0].stderrText())
	_, stderr, status = runDistlock(t, nil, "run", "--url", u, "--permits", "2", "--no-wait", "exports", "--", "touch", marker)
	expectStatus(t, status, 0, stderr)
	if !fileExists(marker) {
		t.Fatal("the third run did not run once a permit was free")
	}
	runs[1].stdin.Close()
	expectStatus(t, runs[1].wait(), 0, runs[1].stderrText())
}
