package testserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// StartMariaDB starts a private MariaDB server for t and stops it when t ends.
// Its URL is a DSN for github.com/go-sql-driver/mysql,
// root@tcp(127.0.0.1:PORT)/test, and the server runs without grant tables
// (anyone connecting over 127.0.0.1 is a superuser), with a database named
// test. args are extra mariadbd arguments. Unlike the other servers, MariaDB
// has no shared server or container: only the tests that need MySQL's dialect
// (package fence's) use it.
func StartMariaDB(t testing.TB, args ...string) *Server {
	t.Helper()
	return startPrivate(t, mariadbBackend, args)
}

var mariadbBackend = &backend{
	name: "MariaDB", env: "DISTLOCK_TEST_MARIADB_URL", example: "root@tcp(127.0.0.1:3306)/test",
	start: startMariaDB,
}

// mariadbBins finds mariadbd and mariadb-install-db (or their mysqld names),
// in PATH or where Debian installs the server (/usr/sbin).
func mariadbBins() (server, installDB string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
			if p := filepath.Join("/usr/sbin", n); isExecutable(p) {
				return p
			}
		}
		return ""
	}
	server, installDB = find("mariadbd", "mysqld"), find("mariadb-install-db", "mysql_install_db")
	if server == "" || installDB == "" {
		return "", "", &notInstalledError{"MariaDB's mariadbd and mariadb-install-db not found (looked in PATH and /usr/sbin)"}
	}
	return server, installDB, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func startMariaDB(args []string) (*Server, error) {
	serverBin, installDB, err := mariadbBins()
	if err != nil {
		return nil, err
	}
	dir, err := makeDir("mariadb")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// mariadbd refuses to run as root unless told to.
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	initDB := func() error {
		cmd := exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + data,
			"--auth-root-authentication-method=normal", "--skip-test-db"}, asRoot...)...)
		cmd.Dir = dir
		if out, err := run(cmd); err != nil {
			return fmt.Errorf("testserver: mariadb-install-db: %v\n%s", err, out)
		}
		return os.MkdirAll(filepath.Join(data, "test"), 0o755) // the database "test"
	}
	if err := initDB(); err != nil {
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
			name:       "mariadbd",
			url:        "root@tcp(" + addr + ")/test",
			addr:       addr,
			dir:        dir,
			log:        filepath.Join(dir, "server.log"),
			stopSignal: syscall.SIGTERM,
		}
		s.command = func() *exec.Cmd {
			argv := append(append([]string{"--no-defaults", "--datadir=" + data,
				"--port=" + port, "--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "sock"),
				"--skip-grant-tables", "--skip-log-bin", "--innodb-flush-log-at-trx-commit=0",
				"--innodb-buffer-pool-size=32M", "--max-connections=200",
			}, asRoot...), args...)
			cmd := exec.Command(serverBin, argv...)
			cmd.Dir = dir
			return cmd
		}
		s.probe = func(ctx context.Context) error { return mysqlGreeting(ctx, addr) }
		s.wipe = func() error {
			if err := os.RemoveAll(data); err != nil {
				return err
			}
			return initDB()
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

// mysqlGreeting connects to addr and reads the server's first packet, which a
// MySQL or MariaDB server sends once it accepts sessions: a handshake (protocol
// version 10), or an error packet (0xff) while it cannot. It speaks that much
// of the protocol itself, so that testserver needs no MySQL client module.
func mysqlGreeting(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("reading the greeting: %w", err)
	}
	n := int(binary.LittleEndian.Uint32(append(hdr[:3:3], 0)))
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("greeting of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return fmt.Errorf("reading the greeting: %w", err)
	}
	if body[0] != 10 {
		return fmt.Errorf("greeting is not a handshake (first byte %#x): %q", body[0], body[1:])
	}
	return nil
}
