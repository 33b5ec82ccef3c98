package lock_test

import (
	"go/ast"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

const rootPackage = "github.com/distlock/lock"

// exportedErrors returns the names of a package's exported package-level
// variables named Err...
func exportedErrors(p sourcePackage) []string {
	var names []string
	for _, name := range p.sortedFiles() {
		for _, decl := range p.files[name].Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}

// docSection returns the text of a package doc's section under "# heading", up
// to the next heading.
func docSection(doc, heading string) string {
	_, rest, ok := strings.Cut(doc, "\n# "+heading+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n# "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestErrorsSectionListsEveryExportedError checks that package lock's "# Errors"
// section is the complete list its doc says it is: every exported Err variable of
// package lock by its name, every one of package driver re-exported by lock
// under the same name (so listed), and every one of a package a program
// imports (the drivers, gocronlock) as pkg.ErrX.
func TestErrorsSectionListsEveryExportedError(t *testing.T) {
	needWorkspace(t)
	pkgs := workspacePackages(t)
	var section string
	var lockErrs []string
	for _, p := range pkgs {
		if p.importPath != rootPackage {
			continue
		}
		for _, f := range p.files {
			if f.Doc != nil {
				section = docSection("\n"+f.Doc.Text(), "Errors")
			}
		}
		lockErrs = exportedErrors(p)
	}
	if section == "" {
		t.Fatal("package lock's doc has no # Errors section")
	}
	if len(lockErrs) == 0 {
		t.Fatal("found no exported error in package lock")
	}
	listed := func(name string) bool {
		return regexp.MustCompile(`(^|[^.\w])` + regexp.QuoteMeta(name) + `\b`).MatchString(section)
	}
	for _, name := range lockErrs {
		if !listed(name) {
			t.Errorf("package lock's # Errors section does not list %s", name)
		}
	}
	checked := 0
	for _, p := range pkgs {
		switch {
		case p.importPath == rootPackage, p.name == "main",
			strings.Contains(p.importPath+"/", "/internal/"),
			strings.HasPrefix(p.importPath, rootPackage+"/bench"),
			strings.HasPrefix(p.importPath, rootPackage+"/soak"):
			continue
		case p.importPath == rootPackage+"/driver":
			for _, name := range exportedErrors(p) {
				checked++
				if !strings.Contains(strings.Join(lockErrs, " ")+" ", name+" ") {
					t.Errorf("driver.%s has no lock.%s: package lock's list cannot name it", name, name)
				}
			}
		default:
			for _, name := range exportedErrors(p) {
				checked++
				if !strings.Contains(section, p.name+"."+name) {
					t.Errorf("package lock's # Errors section does not list %s.%s", p.name, name)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no exported error outside package lock")
	}
}

// TestReadmeLinksTheErrorsList checks that the README sends its readers to the
// one list of errors rather than keeping a list of its own.
func TestReadmeLinksTheErrorsList(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "https://pkg.go.dev/github.com/distlock/lock#hdr-Errors") {
		t.Error("README.md does not link package lock's # Errors section")
	}
}
