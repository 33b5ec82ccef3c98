package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// A consumer is what one kind of user does first: a fresh module that gets
// distlock's modules from the proxy and builds (and, where no server is
// needed, runs) a program.
type consumer struct {
	name    string
	get     []string // module paths to `go get` at the query
	imports []string // packages the program imports for their side effects
	main    string   // the body of main
	args    []string // the program runs with these; nil: built only
}

// consumers lists what a user of each released module does. query is the
// version asked for: a release ("v0.2.0") or a branch ("main").
func consumers(query string) []consumer {
	drivers := []struct{ dir, pkg, scheme string }{
		{"redisdriver", "redisdriver", "redis"},
		{"redlockdriver", "redlockdriver", "redlock"},
		{"pgadvisory", "pgadvisory", "postgres"},
		{"etcddriver", "etcddriver", "etcd"},
		{"zkdriver", "zkdriver", "zk"},
	}
	cs := []consumer{{
		name:    "lock with memdriver and filedriver",
		get:     []string{rootPath},
		imports: []string{rootPath + "/memdriver", rootPath + "/filedriver"},
		main:    holdOnce,
		args:    []string{"mem://", "file://" + "{tmp}/locks"},
	}}
	for _, d := range drivers {
		get := []string{rootPath + "/" + d.dir}
		if query == "main" {
			// A user who picks up an unreleased fix asks for lock at main
			// too: a driver at main may need lock's unreleased API.
			get = []string{rootPath, rootPath + "/" + d.dir}
		}
		cs = append(cs, consumer{
			name:    d.dir + " alone",
			get:     get,
			imports: []string{rootPath + "/" + d.pkg},
			main:    schemeRegistered,
			args:    []string{d.scheme},
		})
	}
	get := []string{rootPath + "/gocronlock"}
	if query == "main" {
		get = []string{rootPath, rootPath + "/gocronlock"}
	}
	cs = append(cs, consumer{
		name:    "gocronlock",
		get:     get,
		imports: []string{rootPath + "/memdriver", "github.com/distlock/lock/gocronlock"},
		main:    cronLocker,
		args:    []string{},
	})
	return cs
}

const holdOnce = `ctx := context.Background()
	for _, url := range os.Args[1:] {
		lk, err := lock.Open(ctx, url)
		if err != nil {
			fail(err)
		}
		l, err := lk.Acquire(ctx, "release-check")
		if err != nil {
			fail(err)
		}
		fmt.Println(url, "token", l.Token())
		if err := l.Release(ctx); err != nil {
			fail(err)
		}
		if err := lk.Close(); err != nil {
			fail(err)
		}
	}`

const schemeRegistered = `var _ = lock.Open
	for _, s := range os.Args[1:] {
		if _, ok := driver.Lookup(s); !ok {
			fail(fmt.Errorf("scheme %s:// is not registered; registered: %v", s, driver.Schemes()))
		}
		fmt.Printf("%s:// registered\n", s)
	}`

const cronLocker = `ctx := context.Background()
	lk, err := lock.Open(ctx, "mem://")
	if err != nil {
		fail(err)
	}
	defer lk.Close()
	l, err := gocronlock.NewLocker(lk).Lock(ctx, "release-check")
	if err != nil {
		fail(err)
	}
	if err := l.Unlock(ctx); err != nil {
		fail(err)
	}
	fmt.Println("gocron lock taken and given back")`

// asked is what the user types after @: the README's "latest" for a release
// (which the proxy, listing it as the highest version, must resolve to it),
// the branch name otherwise.
func asked(query string) string {
	if semver.IsValid(query) {
		return "latest"
	}
	return query
}

func (c consumer) source() string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"os\"\n\n\t\"github.com/distlock/lock\"\n\t\"github.com/distlock/lock/driver\"\n")
	for _, p := range c.imports {
		if strings.HasSuffix(p, "/gocronlock") {
			fmt.Fprintf(&b, "\t%q\n", p)
		} else {
			fmt.Fprintf(&b, "\t_ %q\n", p)
		}
	}
	b.WriteString(")\n\nvar _ = driver.Lookup\nvar _ = context.Background\n\nfunc fail(err error) {\n\tfmt.Fprintln(os.Stderr, err)\n\tos.Exit(1)\n}\n\nfunc main() {\n\t")
	b.WriteString(c.main)
	b.WriteString("\n}\n")
	return b.String()
}

// checker runs go commands as a user would: distlock's modules from the
// proxy only (it comes first, and the public proxies do not serve them), any
// other module from the local module cache's downloads or, failing that, from
// the machine's own GOPROXY (verified by its checksum database as usual); no
// workspace; a module cache of its own, so that a version built before is
// never reused; and a deadline for each command.
type checker struct {
	proxyDir string
	tmp      string
	env      []string
	failures []string
	log      func(format string, args ...any)
}

func newChecker(proxyDir, tmp string, log func(string, ...any)) (*checker, error) {
	goenv := func(name string) (string, error) {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			return "", fmt.Errorf("go env %s: %w", name, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	cache, err := goenv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	upstream, err := goenv("GOPROXY")
	if err != nil {
		return nil, err
	}
	downloads := filepath.Join(cache, "cache", "download")
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOPROXY", "GOFLAGS", "GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GONOPROXY", "GOMODCACHE", "GOBIN", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GOWORK=off",
		"GOPROXY=file://"+proxyDir+",file://"+downloads+","+upstream,
		"GONOSUMDB="+rootPath,
		// -trimpath: the build cache then knows a module's packages by
		// module@version, whichever module cache holds them.
		"GOFLAGS=-mod=mod -buildvcs=false -trimpath",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOBIN="+filepath.Join(tmp, "bin"),
		"GOTOOLCHAIN=local",
	)
	return &checker{proxyDir: proxyDir, tmp: tmp, env: env, log: log}, nil
}

// withChecker runs fn with a checker working in a temporary directory of its
// own, and removes both afterwards.
func withChecker(proxyDir, name string, log func(string, ...any), fn func(c *checker) error) error {
	tmp, err := os.MkdirTemp("", "distlock-release-"+name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	c, err := newChecker(proxyDir, tmp, log)
	if err != nil {
		return err
	}
	defer c.cleanup()
	return fn(c)
}

// setProxy points the checker's commands at another proxy for distlock's
// modules.
func (c *checker) setProxy(dir string) {
	for i, kv := range c.env {
		if strings.HasPrefix(kv, "GOPROXY=file://"+c.proxyDir+",") {
			c.env[i] = "GOPROXY=file://" + dir + "," + strings.TrimPrefix(kv, "GOPROXY=file://"+c.proxyDir+",")
			c.proxyDir = dir
			return
		}
	}
}

// run runs a command in dir and returns its combined output.
func (c *checker) run(dir string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no result within %v", timeout)
	}
	return strings.TrimSpace(out.String()), err
}

func (c *checker) fail(what, out string, err error) {
	c.failures = append(c.failures, fmt.Sprintf("%s: %v\n%s", what, err, indent(out)))
	c.log("FAIL %s: %v\n%s", what, err, indent(out))
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// consumer makes the consumer's module, gets and builds it, and runs it.
func (c *checker) consumer(i int, cs consumer, query string) {
	dir := filepath.Join(c.tmp, fmt.Sprintf("consumer%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.fail(cs.name, "", err)
		return
	}
	src := strings.ReplaceAll(cs.source(), "{tmp}", c.tmp)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/consumer\n\ngo 1.25.0\n"), 0o644); err != nil {
		c.fail(cs.name, "", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		c.fail(cs.name, "", err)
		return
	}
	args := []string{"get"}
	for _, g := range cs.get {
		args = append(args, g+"@"+asked(query))
	}
	if out, err := c.run(dir, 5*time.Minute, "go", args...); err != nil {
		c.fail(cs.name+": go "+strings.Join(args, " "), out, err)
		return
	}
	if out, err := c.run(dir, 5*time.Minute, "go", "mod", "tidy"); err != nil {
		c.fail(cs.name+": go mod tidy", out, err)
		return
	}
	if out, err := c.run(dir, 10*time.Minute, "go", "build", "-o", "consumer", "."); err != nil {
		c.fail(cs.name+": go build", out, err)
		return
	}
	for _, g := range cs.get {
		out, err := c.run(dir, time.Minute, "go", "list", "-m", "-f", "{{.Version}}", g)
		if err != nil {
			c.fail(cs.name+": go list -m "+g, out, err)
			return
		}
		if semver.IsValid(query) && out != query {
			c.fail(cs.name+": go get "+g+"@latest", "", fmt.Errorf("got %s, want the release %s", out, query))
			return
		}
		c.log("ok   %s: %s@%s", cs.name, g, out)
	}
	if cs.args != nil {
		args := make([]string, len(cs.args))
		for i, a := range cs.args {
			args[i] = strings.ReplaceAll(a, "{tmp}", c.tmp)
		}
		out, err := c.run(dir, time.Minute, filepath.Join(dir, "consumer"), args...)
		if err != nil {
			c.fail(cs.name+": running the program", out, err)
			return
		}
		c.log("ok   %s: ran: %s", cs.name, strings.ReplaceAll(out, "\n", "; "))
	}
}

// install installs the command as its README says and runs it on its
// default backend (a file:// directory under TMPDIR).
func (c *checker) install(query string) {
	what := "go install " + rootPath + "/cmd/distlock@" + asked(query)
	out, err := c.run(c.tmp, 10*time.Minute, "go", "install", rootPath+"/cmd/distlock@"+asked(query))
	if err != nil {
		c.fail(what, out, err)
		return
	}
	bin := filepath.Join(c.tmp, "bin", "distlock")
	if semver.IsValid(query) {
		out, err := c.run(c.tmp, time.Minute, "go", "version", "-m", bin)
		if err != nil || !strings.Contains(out, "\tmod\t"+rootPath+"/cmd/distlock\t"+query+"\t") {
			c.fail(what, out, fmt.Errorf("the installed command is not the release %s", query))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "release-check", "--", "sh", "-c", `echo "token $DISTLOCK_TOKEN"`)
	cmd.Env = append(append([]string(nil), c.env...), "TMPDIR="+c.tmp, "DISTLOCK_URL=")
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(got)), "token ") || strings.TrimSpace(string(got)) == "token 0" {
		if err == nil {
			err = fmt.Errorf("unexpected output")
		}
		c.fail("distlock run (installed by "+what+")", string(got), err)
		return
	}
	c.log("ok   %s; distlock run: %s", what, strings.TrimSpace(string(got)))
}

// tidy checks that each released module of the tree at root is tidy when
// built alone against the proxy: what the release commits is what tidy keeps.
func (c *checker) tidy(root string, mods []workModule) {
	for _, m := range releasedInOrder(mods) {
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		out, err := c.run(dir, 5*time.Minute, "go", "mod", "tidy", "-diff")
		if err != nil {
			c.fail("GOWORK=off go mod tidy -diff in "+m.Dir, out, err)
			continue
		}
		c.log("ok   %s is tidy alone", m.Dir)
	}
}

// cleanup removes the checker's module cache, whose files go makes read-only.
func (c *checker) cleanup() {
	cmd := exec.Command("go", "clean", "-modcache")
	cmd.Env = c.env
	_ = cmd.Run()
}
