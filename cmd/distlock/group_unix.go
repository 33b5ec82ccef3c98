//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// groupsSupported: this OS has process groups distlock can signal.
const groupsSupported = true

// setOwnGroup has the command lead a new process group.
func setOwnGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// signalGroup sends s to every process of the group pgid.
func signalGroup(pgid int, s syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("no process group %d", pgid) // kill(0) or kill(-1) would hit others
	}
	return syscall.Kill(-pgid, s)
}

// inTerminalForeground tells whether distlock runs in the foreground process
// group of its controlling terminal. A command moved to a group of its own
// there could not read the terminal (SIGTTIN stops it) and would not get the
// terminal's Ctrl-C or Ctrl-Z, so it stays in distlock's group, which the
// terminal signals as a whole anyway.
func inTerminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	pgrp, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// groupWatcherCommand is the hidden command that runs a groupWatcher.
const groupWatcherCommand = "_group-watcher"

// groupWatcher is a process that kills the command's process group with
// SIGKILL if distlock dies (SIGKILL, OOM, a crash) before it could stop the
// group itself. It is distlock's own executable, started before the command
// and told the group once the command runs; it waits on a pipe that only
// distlock holds open, so the pipe's end without distlock saying "done" means
// distlock is gone. It runs in a process group of its own, out of reach of
// the signals meant for the command. It is told the group before the command
// runs any code of its own (startGated), so nothing the command starts escapes.
type groupWatcher struct {
	pipe *os.File
	cmd  *exec.Cmd
}

// startGroupWatcher starts a watcher, not yet watching any group.
func startGroupWatcher() (*groupWatcher, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, groupWatcherCommand)
	cmd.ExtraFiles = []*os.File{r} // its fd 3; w is close-on-exec, so the command never holds it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &groupWatcher{pipe: w, cmd: cmd}, nil
}

// watch tells the watcher the group to kill should distlock die.
func (g *groupWatcher) watch(pgid int) error {
	_, err := fmt.Fprintf(g.pipe, "%d\n", pgid)
	return err
}

// stop ends the watcher without killing anything; nil is a no-op.
func (g *groupWatcher) stop() {
	if g == nil {
		return
	}
	fmt.Fprintln(g.pipe, "done")
	g.pipe.Close()
	_ = g.cmd.Wait()
}

// runGroupWatcher is the watcher's process, reading distlock's pipe on fd 3.
// It does not check that distlock is its parent: distlock may die, and the
// watcher be reparented, before the watcher gets that far.
func runGroupWatcher(args []string) int {
	pipe := os.NewFile(3, "distlock")
	if len(args) != 0 || !isPipe(pipe) {
		return usageError(os.Stderr, "distlock", "%s is distlock's own, not a command", groupWatcherCommand)
	}
	// It ends when distlock does, never by a signal meant for the command or
	// a hang-up of distlock's terminal.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP)
	in := bufio.NewReader(pipe)
	line, err := in.ReadString('\n')
	if err != nil {
		return exitOK // distlock ended before the command ran (its gate does not run it)
	}
	pgid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil || pgid <= 1 {
		return exitUsage
	}
	if rest, _ := in.ReadString('\n'); rest == "done\n" {
		return exitOK
	}
	// distlock is gone, and its lock with it (or soon, where locks expire):
	// nothing it ran may go on.
	_ = signalGroup(pgid, syscall.SIGKILL)
	return exitOK
}
