package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// goreleaseVersion is golang.org/x/exp's, for cmd/gorelease.
const goreleaseVersion = "v0.0.0-20261113113407-e3970619a1a4"

// apiReport prints, for each released library module of the tree at root,
// gorelease's report of its exported API at version against base (a release
// tag the proxy serves). gorelease refuses a version its proxy already has,
// yet the module's siblings must be there at version (it reads requirements
// as a user would, without replace lines): so each module is reported against
// a copy of the proxy without that one module's version. While the API is v0
// the report informs and never fails the release: gorelease's own verdict is
// printed, its exit status is not the caller's.
func apiReport(root, proxyDir, base, version string, mods []workModule, logf func(string, ...any)) error {
	if base == "" {
		logf("API report: no earlier release to compare %s with", version)
		return nil
	}
	return withChecker(proxyDir, "api", logf, func(c *checker) error {
		return reportEach(c, root, proxyDir, base, version, mods, logf)
	})
}

func reportEach(c *checker, root, proxyDir, base, version string, mods []workModule, logf func(string, ...any)) error {
	tmp := c.tmp
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
		pd := filepath.Join(tmp, "proxy-"+strings.ReplaceAll(m.Dir, "/", "-"))
		if err := proxyWithout(proxyDir, pd, m, version); err != nil {
			return err
		}
		c.setProxy(pd)
		out, err := c.run(filepath.Join(root, filepath.FromSlash(m.Dir)), 10*time.Minute, bin, "-base="+base, "-version="+version)
		verdict := "compatible or documented"
		if err != nil {
			verdict = "gorelease: " + err.Error()
		}
		logf("== API of %s, %s -> %s (%s)\n%s", m.Path, base, version, verdict, indent(out))
	}
	return nil
}

// proxyWithout copies the proxy at src to dst, leaving out m at version.
func proxyWithout(src, dst string, m workModule, version string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		return err
	}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dst, filepath.FromSlash(esc), "@v")
	for _, ext := range []string{".info", ".mod", ".zip"} {
		if err := os.Remove(filepath.Join(vdir, ev+ext)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	list, err := os.ReadFile(filepath.Join(vdir, "list"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var keep []string
	for _, v := range strings.Fields(string(list)) {
		if v != version {
			keep = append(keep, v)
		}
	}
	body := strings.Join(keep, "\n")
	if body != "" {
		body += "\n"
	}
	return os.WriteFile(filepath.Join(vdir, "list"), []byte(body), 0o644)
}
