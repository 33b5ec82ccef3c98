// Command release cuts and checks distlock's releases: it rewrites the
// modules' requirements of each other to a version, builds a module proxy on
// disk that serves the repository's modules exactly as a forge's proxy would,
// and checks there what a new user does first (go get of each driver alone,
// go install of the command, go mod tidy of every library module). The
// scripts/release and scripts/test scripts drive it; docs/DEVELOPING.md says
// how a release is cut.
//
// Usage, from anywhere in the repository:
//
//	release require -version V        require siblings at V (replaces by path in library modules)
//	release require -placeholder      the layout before the first release (for the check's own test)
//	release proxy -out DIR            serve every release tag and HEAD (as a pseudo-version and as "main")
//	release proxy -out DIR -version V serve HEAD as V, and every earlier release tag
//	release check -proxy DIR -query Q check a consumer's first commands at Q (a version, or main)
//	release tidy -proxy DIR           go mod tidy in every module, as a user's machine resolves them
//	release changelog -version V      CHANGELOG.md's Unreleased section becomes V's
//	release tags -version V           print the tags of V, in the order a proxy needs them
//	release api -proxy DIR -base B -version V
//	                                  report each library module's API change from B to V (gorelease)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	root, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		fatal(err)
	}
	mods, err := readWorkspace(root)
	if err != nil {
		fatal(err)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	version := fs.String("version", "", "release version, vMAJOR.MINOR.PATCH")
	out := fs.String("out", "", "directory of the proxy to build")
	proxyDir := fs.String("proxy", "", "directory of a proxy built by `release proxy`")
	query := fs.String("query", "", "what the user asks for: a version or main")
	base := fs.String("base", "", "the previous release")
	ph := fs.Bool("placeholder", false, "write the layout before the first release")
	_ = fs.Parse(os.Args[2:])
	if *version != "" && (!semver.IsValid(*version) || semver.Canonical(*version) != *version || semver.Prerelease(*version) != "") {
		fatal(fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", *version))
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }

	switch os.Args[1] {
	case "require":
		switch {
		case *ph:
			err = requirePlaceholders(root, mods)
		case *version != "":
			err = requireAt(root, *version, mods)
		default:
			fatal(fmt.Errorf("require needs -version or -placeholder"))
		}
		if err == nil {
			if errs := orderErrors(root, mods); len(errs) > 0 {
				err = fmt.Errorf("%s", strings.Join(errs, "\n"))
			}
		}
	case "proxy":
		if *out == "" {
			fatal(fmt.Errorf("proxy needs -out"))
		}
		var notes []string
		notes, err = buildProxy(root, mustAbs(*out), *version, mods)
		for _, n := range notes {
			logf("note: %s", n)
		}
	case "check":
		if *proxyDir == "" || *query == "" {
			fatal(fmt.Errorf("check needs -proxy and -query"))
		}
		err = check(root, mustAbs(*proxyDir), *query, mods, logf)
	case "tidy":
		if *proxyDir == "" {
			fatal(fmt.Errorf("tidy needs -proxy"))
		}
		err = tidyAll(root, mustAbs(*proxyDir), mods, logf)
	case "changelog":
		if *version == "" {
			fatal(fmt.Errorf("changelog needs -version"))
		}
		err = changelogRelease(root, *version, time.Now().UTC().Format("2006-01-02"))
	case "tags":
		if *version == "" {
			fatal(fmt.Errorf("tags needs -version"))
		}
		for _, m := range releasedInOrder(mods) {
			fmt.Println(m.tag(*version))
		}
	case "api":
		if *proxyDir == "" || *version == "" {
			fatal(fmt.Errorf("api needs -proxy and -version"))
		}
		err = apiReport(root, mustAbs(*proxyDir), *base, *version, mods, logf)
	default:
		usage()
	}
	if err != nil {
		fatal(err)
	}
}

// buildProxy serves the repository's released modules: with version, HEAD as
// that version (a release being checked before it is tagged); without, HEAD
// as its pseudo-version and as the answer to "main". Either way every release
// tag of the clone, and whatever those versions require.
func buildProxy(root, out, version string, mods []workModule) ([]string, error) {
	if err := os.RemoveAll(out); err != nil {
		return nil, err
	}
	p := newProxy(root, out)
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	for _, m := range releasedInOrder(mods) {
		v := version
		if v == "" {
			if v, err = headVersion(root, m, head); err != nil {
				return nil, err
			}
		}
		if err := p.add(m, v, head); err != nil {
			return nil, err
		}
		if version == "" {
			if err := p.alias(m, "main", v); err != nil {
				return nil, err
			}
		}
		tags, err := releaseTags(root, m)
		if err != nil {
			return nil, err
		}
		for _, t := range tags {
			if t == version {
				continue // HEAD is what is being released as it
			}
			rev, err := releaseCommit(root, m.tag(t), t)
			if err != nil {
				return nil, err
			}
			if err := p.add(m, t, rev); err != nil {
				return nil, err
			}
		}
	}
	notes, err := p.serveRequirements(mods)
	if err != nil {
		return notes, err
	}
	return notes, p.finish()
}

// check runs every consumer, the install and the tidy checks, and fails with
// a summary of whatever failed.
func check(root, proxyDir, query string, mods []workModule, logf func(string, ...any)) error {
	return withChecker(proxyDir, "check", logf, func(c *checker) error {
		for i, cs := range consumers(query) {
			c.consumer(i, cs, query)
		}
		c.install(query)
		c.tidy(root, mods)
		if len(c.failures) > 0 {
			return fmt.Errorf("%d of the release checks at %s failed:\n%s", len(c.failures), query, strings.Join(c.failures, "\n"))
		}
		logf("all release checks at %s passed", query)
		return nil
	})
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		fatal(err)
	}
	return a
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release require|proxy|check|tags|api [flags]; see go doc github.com/distlock/lock/internal/release")
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
