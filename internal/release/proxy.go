package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// A proxy is a module proxy on disk in the layout GOPROXY=file://DIR reads
// (https://go.dev/ref/mod#goproxy-protocol): for each module, @v/list and, per
// version, .info, .mod and a .zip made from exactly what git holds at the
// version's commit, as a forge's proxy makes it (golang.org/x/mod/zip, which
// also puts the repository's LICENSE into a nested module that has none).
type proxy struct {
	root   string // the git repository
	dir    string
	served map[string]string   // "path@version" -> commit
	listed map[string][]string // path -> released versions
}

func newProxy(root, dir string) *proxy {
	return &proxy{root: root, dir: dir, served: map[string]string{}, listed: map[string][]string{}}
}

func (p *proxy) versionDir(modPath string) (string, error) {
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return "", err
	}
	return filepath.Join(p.dir, filepath.FromSlash(esc), "@v"), nil
}

type info struct {
	Version string
	Time    string
}

// add serves m at version with the files of commit rev.
func (p *proxy) add(m workModule, version, rev string) error {
	key := m.Path + "@" + version
	if prev, ok := p.served[key]; ok {
		if prev != rev {
			return fmt.Errorf("%s would be served from two commits, %s and %s", key, prev, rev)
		}
		return nil
	}
	vdir, err := p.versionDir(m.Path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	gomod, err := git(p.root, "show", rev+":"+filepath.ToSlash(filepath.Join(m.Dir, "go.mod")))
	if err != nil {
		return err
	}
	if got := modfile.ModulePath([]byte(gomod)); got != m.Path {
		return fmt.Errorf("%s at %s: go.mod names module %q", m.Dir, rev, got)
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".mod"), []byte(gomod+"\n"), 0o644); err != nil {
		return err
	}
	t, err := commitTime(p.root, rev)
	if err != nil {
		return err
	}
	inf, _ := json.Marshal(info{Version: version, Time: t.Format("2006-01-02T15:04:05Z")})
	if err := os.WriteFile(filepath.Join(vdir, ev+".info"), inf, 0o644); err != nil {
		return err
	}
	zname := filepath.Join(vdir, ev+".zip")
	zf, err := os.Create(zname)
	if err != nil {
		return err
	}
	subdir := m.Dir
	if subdir == "." {
		subdir = ""
	}
	err = modzip.CreateFromVCS(zf, module.Version{Path: m.Path, Version: version}, p.root, rev, subdir)
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zip of %s: %w", key, err)
	}
	if err := hasLicense(zname, m.Path, version); err != nil {
		return err
	}
	p.served[key] = rev
	if !module.IsPseudoVersion(version) {
		p.listed[m.Path] = append(p.listed[m.Path], version)
	}
	return nil
}

// hasLicense checks that the module's zip carries a licence at its root,
// where pkg.go.dev looks for one before it shows a module's documentation.
func hasLicense(zname, modPath, version string) error {
	r, err := zip.OpenReader(zname)
	if err != nil {
		return err
	}
	defer r.Close()
	want := modPath + "@" + version + "/LICENSE"
	for _, f := range r.File {
		if f.Name == want {
			return nil
		}
	}
	return fmt.Errorf("%s@%s: the module zip has no LICENSE at its root (pkg.go.dev would show no documentation)", modPath, version)
}

// alias answers the query (a branch name such as "main") with version, as a
// forge's proxy resolves `go get module@main`.
func (p *proxy) alias(m workModule, query, version string) error {
	vdir, err := p.versionDir(m.Path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(vdir, ev+".info"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vdir, query+".info"), data, 0o644)
}

// finish writes each module's list of released versions.
func (p *proxy) finish() error {
	for path := range p.served {
		modPath, _, _ := strings.Cut(path, "@")
		vdir, err := p.versionDir(modPath)
		if err != nil {
			return err
		}
		vs := p.listed[modPath]
		semver.Sort(vs)
		body := strings.Join(vs, "\n")
		if body != "" {
			body += "\n"
		}
		if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// releaseTags lists the releases of m in this clone: its semantic-version
// tags, and the releases scripts/release committed ("release vX.Y.Z") that
// HEAD descends from and in which m existed, so that a clone made without
// tags (CI's, a fresh checkout) sees the same releases.
func releaseTags(root string, m workModule) ([]string, error) {
	out, err := git(root, "tag", "--list")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var vs []string
	for _, t := range strings.Fields(out) {
		v := t
		if m.Dir != "." {
			var ok bool
			if v, ok = strings.CutPrefix(t, m.Dir+"/"); !ok {
				continue
			}
		}
		if strings.Contains(v, "/") || !semver.IsValid(v) || semver.Canonical(v) != v {
			continue
		}
		seen[v] = true
		vs = append(vs, v)
	}
	log, err := git(root, "log", "--format=%H %s", "HEAD")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(log, "\n") {
		h, subject, _ := strings.Cut(line, " ")
		v, ok := strings.CutPrefix(subject, releaseSubject(""))
		if !ok || seen[v] || !semver.IsValid(v) || semver.Canonical(v) != v {
			continue
		}
		if _, err := git(root, "cat-file", "-e", h+":"+path.Join(m.Dir, "go.mod")); err != nil {
			continue // m did not exist at that release
		}
		seen[v] = true
		vs = append(vs, v)
	}
	semver.Sort(vs)
	return vs, nil
}

// headVersion is the pseudo-version a forge's proxy gives the commit rev of
// m: based on the module's highest release tag that rev descends from.
func headVersion(root string, m workModule, rev string) (string, error) {
	tags, err := releaseTags(root, m)
	if err != nil {
		return "", err
	}
	base := ""
	for i := len(tags) - 1; i >= 0; i-- {
		c, err := releaseCommit(root, m.tag(tags[i]), tags[i])
		if err != nil {
			return "", err
		}
		if _, err := git(root, "merge-base", "--is-ancestor", c, rev); err == nil {
			base = tags[i]
			break
		}
	}
	t, err := commitTime(root, rev)
	if err != nil {
		return "", err
	}
	short, err := git(root, "rev-parse", "--short=12", rev)
	if err != nil {
		return "", err
	}
	return module.PseudoVersion("v0", base, t, short), nil
}

// serveRequirements serves, for every module served so far, each version of
// a sibling its go.mod requires (a release by its tag or release commit, a
// pseudo-version by its commit), until nothing new is required: what a user's
// `go get` of any served version will ask the forge for. A requirement that
// no commit of this clone stands for is left unserved, as a forge would leave
// it, and returned as a note.
func (p *proxy) serveRequirements(mods []workModule) (notes []string, err error) {
	byPath := map[string]workModule{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	unservable := map[string]bool{}
	for {
		added := false
		keys := make([]string, 0, len(p.served))
		for k := range p.served {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			modPath, _, _ := strings.Cut(k, "@")
			m := byPath[modPath]
			data, err := git(p.root, "show", p.served[k]+":"+filepath.ToSlash(filepath.Join(m.Dir, "go.mod")))
			if err != nil {
				return notes, err
			}
			f, err := modfile.Parse(k+"/go.mod", []byte(data), nil)
			if err != nil {
				return notes, err
			}
			for _, r := range f.Require {
				if !ours(r.Mod.Path) {
					continue
				}
				want := r.Mod.Path + "@" + r.Mod.Version
				if _, ok := p.served[want]; ok || unservable[want] {
					continue
				}
				dep, ok := byPath[r.Mod.Path]
				if !ok || !dep.Released {
					notes = append(notes, fmt.Sprintf("%s requires %s, which is not a released module", k, want))
					unservable[want] = true
					continue
				}
				rev, err := commitOf(p.root, dep, r.Mod.Version)
				if err != nil {
					notes = append(notes, fmt.Sprintf("%s requires %s: %v", k, want, err))
					unservable[want] = true
					continue
				}
				if err := p.add(dep, r.Mod.Version, rev); err != nil {
					return notes, err
				}
				added = true
			}
		}
		if !added {
			return notes, nil
		}
	}
}

// commitOf finds the commit a version of m stands for.
func commitOf(root string, m workModule, version string) (string, error) {
	if version == placeholder {
		return "", fmt.Errorf("%s is the placeholder version, which no proxy serves", version)
	}
	if module.IsPseudoVersion(version) {
		short, err := module.PseudoVersionRev(version)
		if err != nil {
			return "", err
		}
		return git(root, "rev-parse", "--verify", short+"^{commit}")
	}
	return releaseCommit(root, m.tag(version), version)
}
