//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// execGateCommand is the hidden command that holds the command back until
// the groupWatcher knows its process group, then becomes the command (execve).
const execGateCommand = "_exec-gated"

// startGated starts cmd in a process group of its own, such that it runs no
// instruction of its own before the watcher has been told the group. Started
// directly, the command could start processes of its own (and say so) before
// distlock told the watcher; distlock killed in that window left them running
// with nobody to stop them. So distlock starts itself as a gate: the gate
// leads the new group, distlock tells the watcher, then the gate execs the
// command, which keeps the gate's pid, group and parent-death signal. A gate
// whose distlock dies before saying "go" exits without running the command.
//
// It returns the started command (nil if it did not start, with startErr as
// exec.Cmd.Start would report it) and watchErr if the watcher could not be
// told, in which case the command runs unwatched.
func (g *groupWatcher) startGated(cmd *exec.Cmd) (started *exec.Cmd, watchErr, startErr error) {
	if cmd.Err != nil {
		return nil, nil, cmd.Err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer goW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		goR.Close()
		return nil, nil, err
	}
	defer errR.Close()
	gate := exec.Command(exe, append([]string{execGateCommand, cmd.Path}, cmd.Args...)...)
	gate.Stdin, gate.Stdout, gate.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	gate.Env, gate.Dir, gate.SysProcAttr = cmd.Env, cmd.Dir, cmd.SysProcAttr
	gate.ExtraFiles = []*os.File{goR, errW} // its fds 3 and 4
	err = gate.Start()
	goR.Close()
	errW.Close()
	if err != nil {
		return nil, nil, err
	}
	watchErr = g.watch(gate.Process.Pid)
	// A failed write means the gate is gone; its Wait reports how.
	_, _ = io.WriteString(goW, "go\n")
	goW.Close()
	// The error pipe closes on a successful exec (close-on-exec) and carries
	// the errno of a failed one, as os/exec's own fork does.
	msg, _ := io.ReadAll(errR)
	if len(msg) == 0 {
		return gate, watchErr, nil
	}
	_ = gate.Wait()
	errno, err := strconv.Atoi(string(msg))
	if err != nil {
		return nil, nil, fmt.Errorf("starting %s: the gate reported %q", cmd.Path, msg)
	}
	return nil, nil, &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: syscall.Errno(errno)}
}

// runExecGate is the gate's process: args are the command's path and argv;
// fd 3 says "go", fd 4 takes the errno of a failed exec.
func runExecGate(args []string) int {
	goPipe, errPipe := os.NewFile(3, "go"), os.NewFile(4, "exec-error")
	if len(args) < 2 || !isPipe(goPipe) || !isPipe(errPipe) {
		return usageError(os.Stderr, "distlock", "%s is distlock's own, not a command", execGateCommand)
	}
	// Neither pipe may reach the command.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	if line, _ := bufio.NewReader(goPipe).ReadString('\n'); line != "go\n" {
		return exitCannotRun // distlock is gone: the command must not run without it
	}
	err := syscall.Exec(args[0], args[1:], os.Environ())
	errno, ok := err.(syscall.Errno)
	if !ok {
		errno = syscall.EINVAL
	}
	fmt.Fprintf(errPipe, "%d", int(errno))
	return exitCannotRun
}

// isPipe tells whether f is an open pipe.
func isPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
