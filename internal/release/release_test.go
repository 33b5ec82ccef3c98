package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// repoRoot is the repository the test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	return root
}

// cloneHead clones the repository's HEAD into a temporary directory, with a
// committer configured for the test's own commits.
func cloneHead(t *testing.T) (string, []workModule) {
	t.Helper()
	root := repoRoot(t)
	clone := filepath.Join(t.TempDir(), "repo")
	if _, err := git(root, "clone", "-q", root, clone); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"user.name", "release test"}, {"user.email", "test@distlock.invalid"}} {
		if _, err := git(clone, "config", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	mods, err := readWorkspace(clone)
	if err != nil {
		t.Fatal(err)
	}
	return clone, mods
}

func TestEveryReleasedModuleIsTaggedAfterTheSiblingsItRequires(t *testing.T) {
	root := repoRoot(t)
	mods, err := readWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	if errs := orderErrors(root, mods); len(errs) > 0 {
		t.Fatalf("released modules out of order in modules.go:\n%s", strings.Join(errs, "\n"))
	}
}

func TestRequireAtLeavesTheCommandWithoutReplaceAndLibrariesReplacingByPath(t *testing.T) {
	clone, mods := cloneHead(t)
	if err := requireAt(clone, "v0.7.1", mods); err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		f, err := readModFile(clone, m)
		if err != nil {
			t.Fatal(err)
		}
		replaced := map[string]bool{}
		for _, r := range f.Replace {
			if ours(r.Old.Path) {
				if noReplace[m.Dir] {
					t.Errorf("%s: replace %s => %s (go install refuses a module with replace directives)", m.Dir, r.Old.Path, r.New.Path)
				}
				if r.Old.Version != "" {
					t.Errorf("%s: replace of %s at %s only; want every version", m.Dir, r.Old.Path, r.Old.Version)
				}
				if _, err := os.Stat(filepath.Join(clone, filepath.FromSlash(m.Dir), r.New.Path, "go.mod")); err != nil {
					t.Errorf("%s: replace %s => %s names no module directory: %v", m.Dir, r.Old.Path, r.New.Path, err)
				}
				replaced[r.Old.Path] = true
			}
		}
		for _, r := range f.Require {
			if !ours(r.Mod.Path) {
				continue
			}
			if r.Mod.Version != "v0.7.1" {
				t.Errorf("%s requires %s@%s; want v0.7.1", m.Dir, r.Mod.Path, r.Mod.Version)
			}
			if !noReplace[m.Dir] && !replaced[r.Mod.Path] {
				t.Errorf("%s requires %s without replacing it by its directory (GOWORK=off would fetch it)", m.Dir, r.Mod.Path)
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(clone, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range wf.Replace {
		if ours(r.Old.Path) {
			t.Errorf("go.work still replaces %s", r.Old.Path)
		}
	}
}

// The check must refuse what main held before the first release: siblings at
// a placeholder version no proxy serves, and cmd/distlock with replace lines.
// Fed that layout, it has to fail where a new user failed.
func TestCheckFailsOnThePlaceholderRequirementsOfBeforeTheFirstRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds modules through a proxy on disk")
	}
	clone, mods := cloneHead(t)
	if err := requirePlaceholders(clone, mods); err != nil {
		t.Fatal(err)
	}
	if _, err := git(clone, "commit", "-q", "-a", "-m", "placeholders"); err != nil {
		t.Fatal(err)
	}
	proxyDir := filepath.Join(t.TempDir(), "proxy")
	notes, err := buildProxy(clone, proxyDir, "v0.99.0", mods)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(notes, "\n"), placeholder) {
		t.Errorf("building the proxy noted nothing about the placeholder requirements; notes: %q", notes)
	}
	err = check(clone, proxyDir, "v0.99.0", mods, t.Logf)
	if err == nil {
		t.Fatal("the release check passed on the placeholder layout")
	}
	msg := err.Error()
	for _, want := range []string{
		"redisdriver alone: go get",   // internal/redisproto at the placeholder: not found
		"redlockdriver alone: go get", // the same
		"pgadvisory alone",            // lock at the placeholder
		"gocronlock",
		"go install " + rootPath + "/cmd/distlock@latest", // replace directives
		"replace directives",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the check's failure does not mention %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "lock with memdriver and filedriver") {
		t.Errorf("lock alone requires no sibling and should have passed:\n%s", msg)
	}
}
