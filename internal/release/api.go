package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// goreleaseVersion is golang.org/x/exp's, for cmd/gorelease.
const goreleaseVersion = "v0.0.0-20261113113407-e3970619a1a4"

// apiReport prints, for each released library module of the tree at root,
// gorelease's report of its exported API at version against base (a release
// tag the proxy serves). While the API is v0 the report informs and never
// fails the release: gorelease's own verdict is printed, its exit status is
// not the caller's.
func apiReport(root, proxyDir, base, version string, mods []workModule, logf func(string, ...any)) error {
	if base == "" {
		logf("API report: no earlier release to compare %s with", version)
		return nil
	}
	tmp, err := os.MkdirTemp("", "distlock-release-api-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	c, err := newChecker(proxyDir, tmp, logf)
	if err != nil {
		return err
	}
	defer c.cleanup()
	bin := filepath.Join(tmp, "gorelease")
	install := exec.Command("go", "install", "golang.org/x/exp/cmd/gorelease@"+goreleaseVersion)
	install.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("go install gorelease: %v\n%s", err, out)
	}
	for _, m := range releasedInOrder(mods) {
		if m.Dir == "cmd/distlock" {
			continue // a command has no API
		}
		out, err := c.run(filepath.Join(root, filepath.FromSlash(m.Dir)), 10*time.Minute, bin, "-base="+base, "-version="+version)
		verdict := "compatible or documented"
		if err != nil {
			verdict = "gorelease: " + err.Error()
		}
		logf("== API of %s, %s -> %s (%s)\n%s", m.Path, base, version, verdict, indent(out))
	}
	return nil
}
