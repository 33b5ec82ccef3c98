package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"

	"golang.org/x/mod/modfile"
)

// requireAt makes every go.mod of the workspace require the repository's own
// modules at version. Every module but those in noReplace also replaces each
// sibling it requires by its directory, at every version: a program that
// imports the module never sees those lines (replace applies only in the main
// module), while the module's own `GOWORK=off go test` and `go mod tidy` build
// against the working tree. go.work then needs no replace of its own.
func requireAt(root, version string, mods []workModule) error {
	err := eachModFile(root, mods, func(m workModule, f *modfile.File, dirOf map[string]string) error {
		var need []string
		for _, r := range f.Require {
			if ours(r.Mod.Path) {
				if err := f.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				need = append(need, r.Mod.Path)
			}
		}
		for _, r := range append([]*modfile.Replace(nil), f.Replace...) {
			if ours(r.Old.Path) {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return err
				}
			}
		}
		if !noReplace[m.Dir] {
			sort.Strings(need)
			for _, p := range need {
				d, ok := dirOf[p]
				if !ok {
					return fmt.Errorf("%s requires %s, which is not in go.work", m.Path, p)
				}
				rel, err := relDir(m.Dir, d)
				if err != nil {
					return err
				}
				if err := f.AddReplace(p, "", rel, ""); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return dropWorkReplaces(root)
}

// eachModFile calls edit with each module's parsed go.mod (and the directory
// of every module path), then writes the go.mod back.
func eachModFile(root string, mods []workModule, edit func(m workModule, f *modfile.File, dirOf map[string]string) error) error {
	dirOf := map[string]string{}
	for _, m := range mods {
		dirOf[m.Path] = m.Dir
	}
	for _, m := range mods {
		f, err := readModFile(root, m)
		if err != nil {
			return err
		}
		if err := edit(m, f, dirOf); err != nil {
			return err
		}
		if err := writeModFile(root, m, f); err != nil {
			return err
		}
	}
	return nil
}

// requirePlaceholders writes the layout the repository had before its first
// release: siblings required at the placeholder version and replaced at that
// version in every module, cmd/distlock included, and go.work repeating the
// replacements. The release check's own test feeds it to the check, which must
// refuse it.
func requirePlaceholders(root string, mods []workModule) error {
	err := eachModFile(root, mods, func(m workModule, f *modfile.File, dirOf map[string]string) error {
		for _, r := range append([]*modfile.Replace(nil), f.Replace...) {
			if ours(r.Old.Path) {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return err
				}
			}
		}
		for _, r := range f.Require {
			if !ours(r.Mod.Path) {
				continue
			}
			if err := f.AddRequire(r.Mod.Path, placeholder); err != nil {
				return err
			}
			rel, err := relDir(m.Dir, dirOf[r.Mod.Path])
			if err != nil {
				return err
			}
			if err := f.AddReplace(r.Mod.Path, placeholder, rel, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if m.Released && m.Dir != "cmd/distlock" {
			if err := wf.AddReplace(m.Path, placeholder, "./"+m.Dir, ""); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(root, "go.work"), modfile.Format(wf.Syntax), 0o644)
}

func dropWorkReplaces(root string) error {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return err
	}
	for _, r := range append([]*modfile.Replace(nil), wf.Replace...) {
		if ours(r.Old.Path) {
			if err := wf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	wf.Cleanup()
	return os.WriteFile(name, modfile.Format(wf.Syntax), 0o644)
}

func writeModFile(root string, m workModule, f *modfile.File) error {
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), out, 0o644)
}

// relDir is the replacement path from module directory from to module
// directory to, as go.mod writes it ("../x", "..").
func relDir(from, to string) (string, error) {
	rel, err := filepath.Rel(filepath.FromSlash(from), filepath.FromSlash(to))
	if err != nil {
		return "", err
	}
	rel = filepath.ToSlash(rel)
	if rel == "." {
		return "", fmt.Errorf("module %s cannot replace itself", from)
	}
	if !path.IsAbs(rel) && rel[0] != '.' {
		rel = "./" + rel
	}
	return rel, nil
}
