package filedriver

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// kernelWaiters counts, from /proc/locks, the flock(2) calls blocked in the
// kernel waiting for the file at path. ok is false when it cannot tell.
func kernelWaiters(path string) (n int, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	id := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// A blocked request: "1: -> FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF".
		fields := strings.Fields(sc.Text())
		if len(fields) >= 7 && fields[1] == "->" && fields[2] == "FLOCK" && fields[6] == id {
			n++
		}
	}
	return n, sc.Err() == nil
}
