package harness

import (
	"bufio"
	"strings"
	"testing"
)

// A /proc/net/tcp table: two established sockets to port 0x18EB (6379), one
// listening on it, one established to another port, and the server's end of a
// connection (6379 as the local port).
const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A1B2 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A1B3 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:A1B4 0100007F:0050 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:18EB 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 20 4 30 10 -1
`

func TestCountInCountsEstablishedConnectionsToThePort(t *testing.T) {
	got := countIn(bufio.NewScanner(strings.NewReader(tcpTable)), map[uint64]bool{6379: true})
	if got != 2 {
		t.Errorf("countIn = %d, want 2", got)
	}
}
