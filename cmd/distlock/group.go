package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is the command distlock runs and, unless only the command is to be
// signalled, its process group. The command leads a process group of its
// own, and what it starts stays in that group unless it moves out (setsid,
// setpgid: a daemon), so a signal to the group reaches them all.
type child struct {
	cmd   *exec.Cmd
	group bool          // the command leads its own group, signalled as a whole
	watch *groupWatcher // kills the group should distlock die; nil if none
}

// groupPoll is how often distlock looks whether the command's group still
// has processes: no event says so (they are not distlock's children).
const groupPoll = 20 * time.Millisecond

// killWait bounds the wait for the group to be gone after SIGKILL: a killed
// process runs no more code, but one in uninterruptible sleep (a hung NFS
// mount) may take long to go.
const killWait = 5 * time.Second

// signal sends s to the command, or to its whole group.
func (c *child) signal(s os.Signal) {
	if c.group {
		if n, ok := s.(syscall.Signal); ok {
			_ = signalGroup(c.cmd.Process.Pid, n)
			return
		}
	}
	_ = c.cmd.Process.Signal(s)
}

// stopping is where stopping the command is at once it has exited.
type stopping struct {
	termSent bool             // SIGTERM was sent (after a loss)
	killSent bool             // SIGKILL was sent (--grace ran out)
	kill     <-chan time.Time // when --grace runs out, if SIGTERM was sent and SIGKILL not yet
}

// stopLeftovers stops what the command left running in its process group
// after it exited: SIGTERM (unless a loss sent it already), up to --grace for
// them to exit, SIGKILL, and a wait until they are gone. The lock is released
// only after, so nothing the command started runs on without it.
func (r *runner) stopLeftovers(c *child, st stopping) {
	if !c.group {
		return
	}
	pgid := c.cmd.Process.Pid
	if !groupRuns(pgid) {
		return
	}
	if !st.termSent {
		r.verbosef("%s exited; stopping what it left running in its process group", r.cfg.argv[0])
		_ = signalGroup(pgid, syscall.SIGTERM)
		st.kill = time.After(r.grace)
	}
	var giveUp <-chan time.Time
	if st.killSent {
		giveUp = time.After(killWait)
	}
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for groupRuns(pgid) {
		select {
		case s := <-r.sigs:
			c.signal(s)
		case <-st.kill:
			st.kill = nil
			r.errorf("processes %s left in its process group did not exit within --grace %v; killing them", r.cfg.argv[0], r.grace)
			_ = signalGroup(pgid, syscall.SIGKILL)
			giveUp = time.After(killWait)
		case <-giveUp:
			r.errorf("processes of %s's process group %d remain %v after SIGKILL (in uninterruptible sleep?); releasing the lock", r.cfg.argv[0], pgid, killWait)
			return
		case <-tick.C:
		}
	}
}
