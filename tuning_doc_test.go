package lock_test

import (
	"go/ast"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// TestTuningGuideStatesTheDefaults checks that docs/TUNING.md quotes the timing
// the code applies with the default TTL, that its failover figures are the
// published benchmark's, and that the README and the WithTTL and WithGrace docs
// send the reader to it.
func TestTuningGuideStatesTheDefaults(t *testing.T) {
	needWorkspace(t)
	guide := readFile(t, "docs/TUNING.md")
	ttl := lock.DefaultTTL
	for what, d := range map[string]string{
		"the default TTL":              ttl.String(),
		"the refresh interval":         driver.RefreshInterval(ttl).String(),
		"the retry interval":           driver.RetryInterval(ttl).String(),
		"the drift allowance":          driver.Drift(ttl).String(),
		"the validity after a refresh": (ttl - driver.Drift(ttl)).String(),
	} {
		if !strings.Contains(guide, "`"+d+"`") {
			t.Errorf("docs/TUNING.md does not state %s, `%s`", what, d)
		}
	}
	// The guide states the paces as shares of the TTL; so must the code.
	if driver.RefreshInterval(ttl) != ttl/3 || !strings.Contains(guide, "every TTL/3") {
		t.Errorf("docs/TUNING.md's refresh every TTL/3 is not the code's %v of a %v TTL", driver.RefreshInterval(ttl), ttl)
	}
	if driver.RetryInterval(ttl) != ttl/10 || !strings.Contains(guide, "every TTL/10") {
		t.Errorf("docs/TUNING.md's retry every TTL/10 is not the code's %v of a %v TTL", driver.RetryInterval(ttl), ttl)
	}

	results := readFile(t, "bench/results/failover/RESULTS.md")
	figures := regexp.MustCompile(`\| (\d+(?:\.\d+)?) ms \(([\d.]+–[\d.]+)\)`).FindAllStringSubmatch(guide, -1)
	if len(figures) < 6 {
		t.Errorf("docs/TUNING.md quotes %d failover figures, want one per backend (6)", len(figures))
	}
	for _, f := range figures {
		if !strings.Contains(results, "| "+f[1]+" ("+f[2]+") |") {
			t.Errorf("docs/TUNING.md quotes failover %s ms (%s), which bench/results/failover/RESULTS.md does not have", f[1], f[2])
		}
	}

	if !strings.Contains(readFile(t, "README.md"), "(docs/TUNING.md)") {
		t.Error("README.md does not link docs/TUNING.md")
	}
	for _, p := range workspacePackages(t) {
		if p.importPath != rootPackage {
			continue
		}
		linked := map[string]bool{"WithTTL": false, "WithGrace": false}
		for _, f := range p.files {
			for _, decl := range f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil {
					if _, want := linked[fd.Name.Name]; want && strings.Contains(fd.Doc.Text(), "docs/TUNING.md") {
						linked[fd.Name.Name] = true
					}
				}
			}
		}
		for name, ok := range linked {
			if !ok {
				t.Errorf("the doc of %s does not mention docs/TUNING.md", name)
			}
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
