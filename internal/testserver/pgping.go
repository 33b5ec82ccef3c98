package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"
)

// pgPing completes a PostgreSQL session start as the URL's user (trust
// authentication, as testserver's servers and images use) and ends it: the
// server accepts sessions. It speaks the protocol's few startup messages
// itself, so that testserver needs no PostgreSQL client module.
func pgPing(ctx context.Context, rawURL string) error {
	c, _, err := pgSession(ctx, rawURL)
	if err != nil {
		return err
	}
	_, _ = c.Write([]byte{'X', 0, 0, 0, 4}) // terminate
	return c.Close()
}

// pgSession starts a session and returns its connection, idle and ready, and
// the process id of its backend.
func pgSession(ctx context.Context, rawURL string) (net.Conn, int, error) {
	c, pid, err := pgStart(ctx, rawURL)
	if err != nil && c != nil {
		c.Close()
		c = nil
	}
	return c, pid, err
}

func pgStart(ctx context.Context, rawURL string) (net.Conn, int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, 0, err
	}
	user, db := u.User.Username(), strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = user
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	body := []byte{0, 3, 0, 0} // protocol 3.0
	for _, kv := range []string{"user", user, "database", db} {
		body = append(append(body, kv...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	if _, err := c.Write(append(msg, body...)); err != nil {
		return c, 0, err
	}
	r := bufio.NewReader(c)
	pid := 0
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return c, 0, fmt.Errorf("postgres startup: %w", err)
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 || n > 1<<20 {
			return c, 0, errors.New("postgres startup: malformed message")
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return c, 0, fmt.Errorf("postgres startup: %w", err)
		}
		switch head[0] {
		case 'R': // authentication request: 0 is "ok"
			if n < 4 || binary.BigEndian.Uint32(payload) != 0 {
				return c, 0, errors.New("postgres startup: the server asks for a password (testserver uses trust)")
			}
		case 'K': // backend key data: the backend's process id, then its key
			if n >= 4 {
				pid = int(binary.BigEndian.Uint32(payload))
			}
		case 'E':
			return c, 0, fmt.Errorf("postgres startup: %s", pgErrorMessage(payload))
		case 'Z': // ready for query
			_ = c.SetDeadline(time.Time{})
			return c, pid, nil
		}
	}
}

// pgErrorMessage returns the M (message) field of an ErrorResponse.
func pgErrorMessage(p []byte) string {
	for len(p) > 1 {
		code := p[0]
		v, rest, _ := strings.Cut(string(p[1:]), "\x00")
		if code == 'M' {
			return v
		}
		p = []byte(rest)
	}
	return "error"
}
