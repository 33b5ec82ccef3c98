package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// StartPostgres starts a private PostgreSQL server for t and stops it when t ends.
// The superuser is postgres with trust authentication (no password). args are extra
// postgres arguments, such as "-c", "max_connections=20".
func StartPostgres(t testing.TB, args ...string) *Server {
	t.Helper()
	return startPrivate(t, postgresBackend, args)
}

// pgBinGlob is where Debian and Ubuntu install PostgreSQL's server binaries.
var pgBinGlob = "/usr/lib/postgresql/*/bin"

// pgBinDir finds the directory holding initdb and postgres: from PATH, from
// pg_config --bindir, or from pgBinGlob (newest version first).
func pgBinDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	if p, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); has(dir) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob(pgBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", &notInstalledError{"PostgreSQL's initdb and postgres not found (looked in PATH, pg_config --bindir and " + pgBinGlob + ")"}
}

// pgVersion is the major version in a path like /usr/lib/postgresql/15/bin.
func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// pgCredential is the user that runs initdb and postgres: they refuse to run as root,
// so root runs them as the postgres user.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func startPostgres(args []string) (*Server, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	dir, err := makeDir("pg")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := func() error {
		cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
			"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := run(cmd); err != nil {
			return fmt.Errorf("testserver: initdb: %v\n%s", err, out)
		}
		return nil
	}
	if err := initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}

	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		port := strconv.Itoa(ports[0])
		addr := net.JoinHostPort("127.0.0.1", port)
		s := &Server{
			name:       "postgres",
			url:        "postgres://postgres@" + addr + "/postgres?sslmode=disable",
			addr:       addr,
			dir:        dir,
			log:        filepath.Join(dir, "server.log"),
			stopSignal: syscall.SIGINT, // fast shutdown
		}
		s.command = func() *exec.Cmd {
			argv := append([]string{"-D", data, "-p", port, "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
				"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off",
			}, args...)
			cmd := exec.Command(filepath.Join(bin, "postgres"), argv...)
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			return cmd
		}
		s.probe = func(ctx context.Context) error { return pgPing(ctx, s.url) }
		s.wipe = func() error {
			if err := os.RemoveAll(data); err != nil {
				return err
			}
			return initdb()
		}
		if err = s.launch(); err == nil {
			err = s.waitReady()
		}
		if err == nil {
			return s, nil
		}
		if !addrInUse(err) || attempt == portAttempts {
			s.close()
			return nil, err
		}
	}
}
