package harness

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// work is a holder's work: d of waiting, timed by a timerfd that the
// runtime's poller waits on, so that it lasts d whatever else the process
// does. A Go timer shorter than a millisecond fires late in a process with
// nothing else to do (the poller sleeps in whole milliseconds: a 500 µs
// time.Sleep lasts about 1.1 ms) and on time in one woken by network replies,
// so a hold by time.Sleep lasted twice as long for a contestant that waits
// quietly as for one that polls.
func work(d time.Duration) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		time.Sleep(d)
		return
	}
	f := os.NewFile(uintptr(fd), "timerfd") // non-blocking: read through the poller
	defer f.Close()
	start := time.Now()
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	var buf [8]byte
	if unix.TimerfdSettime(fd, 0, &spec, nil) != nil {
		time.Sleep(d)
	} else if _, err := f.Read(buf[:]); err != nil {
		time.Sleep(d - time.Since(start))
	}
}
