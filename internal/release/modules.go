package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// rootPath is the module path of the repository's root module; every other
// module of the repository has it as prefix.
const rootPath = "github.com/distlock/lock"

// released lists the modules a release publishes, in the order their tags are
// created: each after every sibling it requires, so that a proxy asked for a
// module finds what its go.mod names (checked by orderErrors).
var released = []string{
	".",
	"internal/redisproto",
	"redisdriver",
	"redlockdriver",
	"pgadvisory",
	"etcddriver",
	"zkdriver",
	"gocronlock",
	"cmd/distlock",
}

// unreleased lists the modules of the workspace that no release publishes:
// test harnesses, benchmarks and this tool. Nothing outside the repository may
// import them, so they are never tagged.
var unreleased = []string{
	"bench",
	"soak",
	"internal/telemetrytest",
	"internal/testserver/servertest",
	"gocronlock/internal/redistest",
	"internal/release",
	"fence/fencetest",
}

// noReplace lists the modules whose go.mod has no replace directive at all:
// `go install pkg@version` refuses a module that has one.
var noReplace = map[string]bool{"cmd/distlock": true}

// placeholder is the version at which the modules named each other before the
// first release (and which no proxy serves).
const placeholder = "v0.0.0-00010101000000-000000000000"

// workModule is one module of the repository.
type workModule struct {
	Dir      string // slash-separated, relative to the repository root; "." for the root
	Path     string // module path
	Released bool
}

// tag is the git tag that gives the module this version: nested modules carry
// their directory as prefix, as the go command looks them up.
func (m workModule) tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// ours reports whether a module path is one of this repository's modules.
func ours(p string) bool { return p == rootPath || strings.HasPrefix(p, rootPath+"/") }

// readWorkspace lists the modules of go.work at root. Every one must be in
// released or unreleased, so that a new module is a decision, not an accident.
func readWorkspace(root string) ([]workModule, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	rel := map[string]bool{}
	for _, d := range released {
		rel[d] = true
	}
	unrel := map[string]bool{}
	for _, d := range unreleased {
		unrel[d] = true
	}
	var mods []workModule
	for _, u := range wf.Use {
		dir := path.Clean(strings.TrimPrefix(filepath.ToSlash(u.Path), "./"))
		if !rel[dir] && !unrel[dir] {
			return nil, fmt.Errorf("module %s is in go.work but in neither list of internal/release/modules.go: add it to released (published, tagged) or unreleased", dir)
		}
		p, err := modulePath(filepath.Join(root, filepath.FromSlash(dir), "go.mod"))
		if err != nil {
			return nil, err
		}
		mods = append(mods, workModule{Dir: dir, Path: p, Released: rel[dir]})
	}
	for _, d := range released {
		if !hasDir(mods, d) {
			return nil, fmt.Errorf("released module %s is not in go.work", d)
		}
	}
	return mods, nil
}

func hasDir(mods []workModule, dir string) bool {
	for _, m := range mods {
		if m.Dir == dir {
			return true
		}
	}
	return false
}

// releasedInOrder returns the released modules in tag order.
func releasedInOrder(mods []workModule) []workModule {
	var out []workModule
	for _, d := range released {
		for _, m := range mods {
			if m.Dir == d {
				out = append(out, m)
			}
		}
	}
	return out
}

func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	p := modfile.ModulePath(data)
	if p == "" {
		return "", fmt.Errorf("%s: no module line", gomod)
	}
	return p, nil
}

// orderErrors reports released modules whose go.mod requires a sibling that
// comes later in released (or is not released at all: a user could not get it).
func orderErrors(root string, mods []workModule) []string {
	var errs []string
	pos := map[string]int{}
	for i, m := range releasedInOrder(mods) {
		pos[m.Path] = i
	}
	for i, m := range releasedInOrder(mods) {
		f, err := readModFile(root, m)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, r := range f.Require {
			if !ours(r.Mod.Path) {
				continue
			}
			j, ok := pos[r.Mod.Path]
			switch {
			case !ok:
				errs = append(errs, fmt.Sprintf("%s requires %s, which is not released", m.Path, r.Mod.Path))
			case j >= i:
				errs = append(errs, fmt.Sprintf("%s requires %s, which is tagged after it in internal/release/modules.go", m.Path, r.Mod.Path))
			}
		}
	}
	return errs
}

func readModFile(root string, m workModule) (*modfile.File, error) {
	name := filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(name, data, nil)
}
