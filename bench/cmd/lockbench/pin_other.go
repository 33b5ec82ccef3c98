//go:build !linux

package main

import (
	"errors"
	"runtime"
)

func pinTo(int) error { return errors.New("CPU pinning needs Linux") }

func cpusAllowed() int { return runtime.NumCPU() }
