package harness

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// countConns counts the established TCP connections to the given ports, from
// /proc/self/net/tcp and tcp6 (0 where they do not exist). The tables cover the
// whole network namespace, not only this process, so the ports must be those of
// private servers, and a figure is a difference of two counts.
func countConns(ports []int) (int, error) {
	want := map[uint64]bool{}
	for _, p := range ports {
		want[uint64(p)] = true
	}
	n := 0
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += countIn(bufio.NewScanner(f), want)
		f.Close()
	}
	return n, nil
}

// countIn counts the lines of a /proc/net/tcp table in state ESTABLISHED (01)
// whose remote port is wanted. A socket of this process to the server is
// listed once; the server's end is listed too when the server's socket is in
// the same network namespace, but with the port as its local, not remote, port.
func countIn(s *bufio.Scanner, want map[uint64]bool) int {
	n := 0
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 4 || f[3] != "01" {
			continue
		}
		_, port, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err == nil && want[p] {
			n++
		}
	}
	return n
}
