package lock_test

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// siblingModules returns the modules of this repository, other than the root
// one, that the module in dir needs, directly or through one another, as its
// go.mod's require lines name them.
func siblingModules(t *testing.T, dir string) map[string]bool {
	t.Helper()
	need := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		for _, line := range strings.Split(readFile(t, filepath.Join(dir, "go.mod")), "\n") {
			fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
			if len(fields) < 2 || !strings.HasPrefix(fields[0], rootPackage+"/") || strings.HasPrefix(fields[1], "=>") {
				continue
			}
			if mod := fields[0]; !need[mod] {
				need[mod] = true
				walk(strings.TrimPrefix(mod, rootPackage+"/"))
			}
		}
	}
	walk(dir)
	return need
}

// TestReadmeLocalCheckoutReplacesEveryModuleADriverNeeds checks the README's
// "From a local checkout": for every driver its table names, the replace lines it
// lists are the driver's module and every module of this repository the driver
// needs (a missing one would be fetched from the proxy, at a version that does
// not exist), and the example's go mod edit replaces all those of redisdriver.
func TestReadmeLocalCheckoutReplacesEveryModuleADriverNeeds(t *testing.T) {
	needWorkspace(t)
	readme := readFile(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n### From a local checkout\n")
	if !ok {
		t.Fatal(`README.md has no "### From a local checkout" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	inRoot := map[string]bool{"memdriver": true, "filedriver": true}
	// want is what a program importing pkg must replace besides the root module.
	want := func(pkg string) []string {
		if inRoot[pkg] {
			return nil
		}
		need := siblingModules(t, pkg)
		need[rootPackage+"/"+pkg] = true
		return slices.Sorted(maps.Keys(need))
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := 0
	seen := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 2 || !strings.HasPrefix(line, "| `") {
			continue
		}
		rows++
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			pkg := m[1]
			seen[pkg] = true
			var got []string
			switch {
			case strings.Contains(cells[1], "that module"):
				got = []string{rootPackage + "/" + pkg}
			case strings.Contains(cells[1], "nothing more"):
			default:
				for _, r := range code.FindAllStringSubmatch(cells[1], -1) {
					got = append(got, rootPackage+strings.TrimPrefix(r[1], "…"))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want(pkg)) {
				t.Errorf("README: a program importing %s replaces %v; it needs %v", pkg, got, want(pkg))
			}
		}
	}
	for _, pkg := range []string{"memdriver", "filedriver", "redisdriver", "redlockdriver", "pgadvisory", "etcddriver", "zkdriver", "gocronlock"} {
		if !seen[pkg] {
			t.Errorf("README's local-checkout table (%d rows) does not say what %s needs", rows, pkg)
		}
	}

	var replaced []string
	for _, m := range regexp.MustCompile(`-replace (\S+)=`).FindAllStringSubmatch(section, -1) {
		if m[1] != rootPackage {
			replaced = append(replaced, m[1])
		}
	}
	slices.Sort(replaced)
	if !slices.Equal(replaced, want("redisdriver")) || !strings.Contains(section, "-replace "+rootPackage+"=") {
		t.Errorf("README's go mod edit for redisdriver replaces %v and the root module: want the root module and %v", replaced, want("redisdriver"))
	}
}
