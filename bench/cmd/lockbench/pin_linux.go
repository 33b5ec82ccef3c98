package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinTo sets the CPU affinity of every thread of this process to cpu. Threads
// the runtime creates later inherit it from their creator; a thread created
// while the loop runs shows up in the next pass.
func pinTo(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			// A thread may exit between the listing and the call.
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return err
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// cpusAllowed returns how many CPUs this process may run on.
func cpusAllowed() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 1
	}
	return set.Count()
}
