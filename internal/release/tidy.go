package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tidyAll runs `go mod tidy` in every module of the tree at root as a user's
// machine would see it (the proxy for distlock's modules, no workspace), so
// that cmd/distlock's go.sum, the one go.sum that names distlock's modules,
// holds the hashes of the versions it requires.
func tidyAll(root, proxyDir string, mods []workModule, logf func(string, ...any)) error {
	return withChecker(proxyDir, "tidy", logf, func(c *checker) error {
		for _, m := range mods {
			out, err := c.run(filepath.Join(root, filepath.FromSlash(m.Dir)), 5*time.Minute, "go", "mod", "tidy")
			if err != nil {
				return fmt.Errorf("go mod tidy in %s: %v\n%s", m.Dir, err, indent(out))
			}
		}
		return nil
	})
}

// changelogRelease turns CHANGELOG.md's "Unreleased" section into the
// release's, under a new empty "Unreleased".
func changelogRelease(root, version, date string) error {
	name := filepath.Join(root, "CHANGELOG.md")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	const head = "## [Unreleased]"
	s := string(data)
	if strings.Contains(s, "## ["+strings.TrimPrefix(version, "v")+"]") {
		return nil // already there: a release that was prepared by hand
	}
	if !strings.Contains(s, head) {
		return fmt.Errorf("CHANGELOG.md has no %q section", head)
	}
	s = strings.Replace(s, head, head+"\n\n## ["+strings.TrimPrefix(version, "v")+"] - "+date, 1)
	return os.WriteFile(name, []byte(s), 0o644)
}
