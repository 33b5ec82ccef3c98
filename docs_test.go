package lock_test

import (
	"go/ast"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryPackageDocStartsWithItsName checks every package of every module of
// the workspace as go doc and pkg.go.dev show it: one package comment, attached
// to the package clause, whose first sentence names the package ("Package
// redisdriver ...", or "Command distlock ..." for a program). A blank line
// inside the comment detaches what comes before it, and go doc then shows only
// the rest (or nothing).
func TestEveryPackageDocStartsWithItsName(t *testing.T) {
	for _, p := range workspacePackages(t) {
		var docs []string
		for _, name := range p.sortedFiles() {
			f := p.files[name]
			if f.Doc != nil {
				docs = append(docs, name)
			}
			for _, g := range f.Comments {
				if g == f.Doc || g.End() >= f.Package || onlyDirectives(g) {
					continue
				}
				t.Errorf("%s:%d: a comment before the package clause is not part of the package doc (a blank line detaches it): %.60q",
					name, p.fset.Position(g.Pos()).Line, g.Text())
			}
		}
		if len(docs) > 1 {
			t.Errorf("%s: package doc in %d files (%s); go doc joins them: keep one", p.dir, len(docs), strings.Join(docs, ", "))
		}
		var text string
		for _, name := range docs {
			text += p.files[name].Doc.Text()
		}
		want := "Package " + p.name + " "
		if p.name == "main" {
			want = "Command " + filepath.Base(absDir(t, p.dir)) + " "
		}
		switch {
		case strings.TrimSpace(text) == "":
			t.Errorf("%s: package %s has no package doc; want one starting %q", p.dir, p.name, want)
		case !strings.HasPrefix(text, want):
			t.Errorf("%s: package doc starts %.40q; want %q", p.dir, text, want)
		}
	}
}

// onlyDirectives reports whether a comment group holds only directives
// (//go:build, //go:generate, ...), which are not documentation.
func onlyDirectives(g *ast.CommentGroup) bool {
	for _, c := range g.List {
		if !strings.HasPrefix(c.Text, "//go:") && !strings.HasPrefix(c.Text, "// +build") {
			return false
		}
	}
	return true
}

func absDir(t *testing.T, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// sectionRefs finds the references to a section of the package's own doc: see
// Fencing in the package documentation, "Sessions and lost locks" in the package
// doc, the package documentation, "Inspection".
var sectionRefs = []*regexp.Regexp{
	regexp.MustCompile(`\b[Ss]ee ([A-Z][^()".;:]*?) in the package doc`),
	regexp.MustCompile(`"([^"]+)" in the package doc`),
	regexp.MustCompile(`the package doc(?:umentation)?, "([^"]+)"`),
}

// TestPackageDocSectionReferencesExist checks that every comment sending the
// reader to a section of its package's documentation ("see Waiting in the
// package documentation") names a heading that the package doc has, so the
// reader finds it in go doc.
func TestPackageDocSectionReferencesExist(t *testing.T) {
	refs := 0
	for _, p := range workspacePackages(t) {
		var headings []string
		for _, f := range p.files {
			if f.Doc == nil {
				continue
			}
			for _, line := range strings.Split(f.Doc.Text(), "\n") {
				if h, ok := strings.CutPrefix(line, "# "); ok {
					headings = append(headings, strings.ToLower(h))
				}
			}
		}
		for _, name := range p.sortedFiles() {
			for _, g := range p.files[name].Comments {
				text := strings.Join(strings.Fields(g.Text()), " ")
				if !strings.Contains(text, "package doc") {
					continue
				}
				for _, re := range sectionRefs {
					for _, m := range re.FindAllStringSubmatch(text, -1) {
						refs++
						want := strings.ToLower(m[1])
						if !slices.ContainsFunc(headings, func(h string) bool { return strings.HasPrefix(h, want) }) {
							t.Errorf("%s:%d: %q names no section of package %s's doc (headings: %s)",
								name, p.fset.Position(g.Pos()).Line, m[0], p.name, strings.Join(headings, "; "))
						}
					}
				}
			}
		}
	}
	if refs == 0 {
		t.Fatal("found no reference to a package doc section: the patterns no longer match the comments")
	}
}
