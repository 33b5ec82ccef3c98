//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
)

// groupRuns tells whether a process of the group pgid runs. Zombies do not
// count: they run no code, and the init of a container may never reap the
// orphans it inherits.
func groupRuns(pgid int) bool {
	dir, err := os.Open("/proc")
	if err != nil {
		return false
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 || f[0][0] == 'Z' || f[0][0] == 'X' {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
			return true
		}
	}
	return false
}
