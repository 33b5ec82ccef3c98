package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// git runs git in the repository at root and returns its trimmed output.
func git(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// commitTime is the committer time of rev, in UTC, as pseudo-versions use it.
func commitTime(root, rev string) (time.Time, error) {
	s, err := git(root, "log", "-1", "--format=%ct", rev)
	if err != nil {
		return time.Time{}, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit time of %s: %q", rev, s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// releaseCommit finds the commit of a release: its tag when the clone has
// tags, else the commit that scripts/release made ("release vX.Y.Z"), so that a
// clone made without tags still checks the same content.
func releaseCommit(root, tag, version string) (string, error) {
	if rev, err := git(root, "rev-parse", "--verify", "--quiet", "refs/tags/"+tag+"^{commit}"); err == nil && rev != "" {
		return rev, nil
	}
	log, err := git(root, "log", "--format=%H %s", "HEAD")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(log, "\n") {
		if h, subject, ok := strings.Cut(line, " "); ok && subject == releaseSubject(version) {
			return h, nil
		}
	}
	return "", fmt.Errorf("no tag %s and no commit %q in this clone (git fetch --tags?)", tag, releaseSubject(version))
}

// releaseSubject is the subject of the commit scripts/release makes.
func releaseSubject(version string) string { return "release " + version }
