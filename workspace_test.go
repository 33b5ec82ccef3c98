package lock_test

import (
	"bufio"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// sourcePackage is one package of the workspace as its source files declare it.
type sourcePackage struct {
	dir        string // relative to the workspace root
	importPath string
	name       string
	files      map[string]*ast.File // the package's files for this platform, tests excluded
	fset       *token.FileSet
}

// workspaceModules returns the directories of the workspace's modules, relative to
// the root: go.work's use list, or the root module alone where there is no
// go.work (a copy of the module without its workspace).
func workspaceModules(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("go.work")
	if os.IsNotExist(err) {
		return []string{"."}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	inUse := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case inUse && line == ")":
			inUse = false
		case inUse && line != "":
			dirs = append(dirs, filepath.Clean(line))
		case line == "use (":
			inUse = true
		case strings.HasPrefix(line, "use "):
			dirs = append(dirs, filepath.Clean(strings.TrimSpace(strings.TrimPrefix(line, "use "))))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("go.work lists no module")
	}
	return dirs
}

// needWorkspace skips a test that reads other modules' files when the root
// module is tested without its workspace (from the module cache, where the
// other modules' files are not beside it).
func needWorkspace(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("go.work"); os.IsNotExist(err) {
		t.Skip("no go.work: the other modules of the repository are not here")
	}
}

// workspacePackages parses the package clause and the comments before it of every
// package in every module of the workspace (testdata, hidden directories and
// nested modules' directories belong to no package of their parent module).
func workspacePackages(t *testing.T) []sourcePackage {
	t.Helper()
	parsed.mu.Lock()
	defer parsed.mu.Unlock()
	if parsed.pkgs == nil {
		pkgs := parseWorkspace(t)
		if !t.Failed() {
			parsed.pkgs = pkgs // read-only from here on
		}
		return pkgs
	}
	return parsed.pkgs
}

// parsed keeps the workspace's packages for the tests after the first.
var parsed struct {
	mu   sync.Mutex
	pkgs []sourcePackage
}

func parseWorkspace(t *testing.T) []sourcePackage {
	t.Helper()
	var pkgs []sourcePackage
	for _, mod := range workspaceModules(t) {
		modPath := modulePath(t, mod)
		err := filepath.WalkDir(mod, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			base := d.Name()
			if path != mod {
				if base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module: walked as itself, if the workspace uses it
				}
			}
			bp, err := build.Default.ImportDir(path, 0)
			if err != nil {
				if _, ok := err.(*build.NoGoError); ok {
					return nil
				}
				t.Errorf("%s: %v", path, err)
				return nil
			}
			if len(bp.GoFiles) == 0 {
				return nil // tests only: go doc shows no package
			}
			rel, err := filepath.Rel(mod, path)
			if err != nil {
				return err
			}
			p := sourcePackage{dir: path, importPath: modPath, name: bp.Name, files: map[string]*ast.File{}, fset: token.NewFileSet()}
			if rel != "." {
				p.importPath += "/" + filepath.ToSlash(rel)
			}
			for _, name := range bp.GoFiles {
				file := filepath.Join(path, name)
				f, err := parser.ParseFile(p.fset, file, nil, parser.ParseComments)
				if err != nil {
					t.Errorf("%v", err)
					continue
				}
				p.files[file] = f
			}
			pkgs = append(pkgs, p)
			return nil
		})
		if err != nil {
			t.Fatalf("walking module %s: %v", mod, err)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no package found")
	}
	return pkgs
}

// modulePath reads the module path from the go.mod in dir.
func modulePath(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(path), `"`)
		}
	}
	t.Fatalf("%s/go.mod has no module line", dir)
	return ""
}

// sortedFiles returns the package's file names in order, for stable messages.
func (p sourcePackage) sortedFiles() []string {
	names := make([]string, 0, len(p.files))
	for name := range p.files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
