package testserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// A network partition on one machine. Every member of a cluster listens on
// 127.0.0.1, so addresses cannot tell the members' traffic apart; ports and the
// sending process's user can. As root, the members of a cluster (of two or more)
// run under users of their own (memberUID), and Partition installs iptables rules
// in a chain of its own, jumped to from OUTPUT (every loopback packet passes
// OUTPUT once, when it is sent):
//
//   - packets to or from the member's peer ports (etcd's peer port, ZooKeeper's
//     quorum and election ports) are dropped: the connections the others made to
//     it, in both directions;
//   - a packet that the member's user sends to another member's peer port marks
//     its connection (CONNMARK), and every packet of a marked connection is
//     dropped: the connections the member made to the others, in both directions
//     (the others' answers are sent by their own users, so only the mark catches
//     them). A connection made before the partition is marked by the member's
//     next packet on it, data or ACK.
//
// Client ports are left alone: clients on this machine still reach every member,
// as a client on the member's side of a partition would. Heal deletes the rules.

// iptablesHint is how to get iptables on Debian; scripts/install-backends does it.
const iptablesHint = "apt-get install -y iptables (scripts/install-backends installs it)"

// memberUIDBase is the first of the users that cluster members run under as root:
// member i runs as memberUIDBase+i, a user with no account, so that Partition can
// tell its packets from the other members'. Members of different clusters share
// users; the rules name the cluster's ports, so they never touch another cluster.
const memberUIDBase = 1_860_000_000

// memberCredential returns the user that member i of an n-member cluster runs
// under: its own as root, nil (the test's) otherwise or for a single server.
func memberCredential(n, i int) *syscall.Credential {
	if n < 2 || os.Geteuid() != 0 {
		return nil
	}
	id := uint32(memberUIDBase + i)
	return &syscall.Credential{Uid: id, Gid: id}
}

// chownTree gives dir and everything in it to cred's user (nil: nothing to do).
func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
}

// Partition is a network partition that cuts one member off from the rest of
// its cluster. Cluster.Partition makes it; Heal ends it.
type Partition struct {
	chain string
	mark  string

	mu     sync.Mutex
	healed bool
}

var partitionSeq atomic.Int64

// Partition cuts member i off from the other members of c, in both directions:
// no peer traffic passes between it and them, while clients can still reach
// every member's client port (so a client of member i sits on its side of the
// partition). The partition ends with Heal, or when t ends, whatever the test's
// outcome. Without root or iptables the test is skipped (failed when
// DISTLOCK_TEST_REQUIRE=1).
func (c *Cluster) Partition(t testing.TB, i int) *Partition {
	t.Helper()
	if i < 0 || i >= len(c.Members) {
		t.Fatalf("testserver: Partition(%d) on a %d-member cluster", i, len(c.Members))
	}
	if len(c.Members) < 2 {
		t.Fatalf("testserver: Partition on a cluster of one")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "a network partition needs root (iptables rules and members under users of their own)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		skipOrFail(t, "a network partition needs iptables: "+iptablesHint)
	}
	p, err := c.Cut(i)
	if p != nil {
		t.Cleanup(func() {
			if err := p.Heal(); err != nil {
				t.Errorf("testserver: %v", err)
			}
		})
	}
	if err != nil {
		skipOrFail(t, err.Error())
	}
	t.Logf("testserver: member %d (%s) partitioned from the others", i, c.Members[i].Addr())
	return p
}

// Cut is Partition for programs that are not tests (the soak): it returns an
// error where Partition skips, and the caller heals the partition. When the
// rules were half made, it returns the partition too, for Heal to remove them.
func (c *Cluster) Cut(i int) (*Partition, error) {
	if i < 0 || i >= len(c.Members) || len(c.Members) < 2 {
		return nil, fmt.Errorf("testserver: cannot cut member %d of a %d-member cluster off", i, len(c.Members))
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("testserver: a network partition needs root (iptables rules and members under users of their own)")
	}
	cred := memberCredential(len(c.Members), i)
	var own, others []string
	for j := range c.Members {
		for _, port := range c.peerPorts(j) {
			if j == i {
				own = append(own, strconv.Itoa(port))
			} else {
				others = append(others, strconv.Itoa(port))
			}
		}
	}
	seq := partitionSeq.Add(1)
	p := &Partition{
		// iptables chain names have at most 28 characters.
		chain: fmt.Sprintf("DLPART-%d-%d", os.Getpid(), seq),
		// A mark of our own per partition, so that parallel tests never share one.
		mark: fmt.Sprintf("0x%x", uint32(0x5d000000)|uint32(os.Getpid()&0xfff)<<12|uint32(seq&0xfff)),
	}
	rules := [][]string{
		{"-N", p.chain},
		{"-A", p.chain, "-p", "tcp", "-m", "multiport", "--dports", strings.Join(own, ","), "-j", "DROP"},
		{"-A", p.chain, "-p", "tcp", "-m", "multiport", "--sports", strings.Join(own, ","), "-j", "DROP"},
		{"-A", p.chain, "-p", "tcp", "-m", "owner", "--uid-owner", strconv.FormatUint(uint64(cred.Uid), 10),
			"-m", "multiport", "--dports", strings.Join(others, ","), "-j", "CONNMARK", "--set-mark", p.mark},
		{"-A", p.chain, "-m", "connmark", "--mark", p.mark, "-j", "DROP"},
		{"-I", "OUTPUT", "1", "-j", p.chain, "-m", "comment", "--comment", "distlock testserver partition"},
	}
	for _, r := range rules {
		if err := iptables(r...); err != nil {
			return p, fmt.Errorf("cannot partition member %d: %w", i, err)
		}
	}
	return p, nil
}

// Heal ends the partition: it deletes its rules. Connections the partition stalled
// resume (or time out and are made again, as the servers choose). Healing twice
// does nothing.
func (p *Partition) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed {
		return nil
	}
	p.healed = true
	var errs []error
	// Each step runs even when an earlier one failed (the rules were half made).
	if exists(p.chain) {
		for iptables("-D", "OUTPUT", "-j", p.chain, "-m", "comment", "--comment", "distlock testserver partition") == nil {
		}
		if err := iptables("-F", p.chain); err != nil {
			errs = append(errs, err)
		}
		if err := iptables("-X", p.chain); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("healing the partition %s: %w", p.chain, errors.Join(errs...))
	}
	return nil
}

// Dropped returns how many packets the partition dropped so far, per rule: to the
// member's peer ports, from them, and on connections the member made.
func (p *Partition) Dropped() (toMember, fromMember, memberDialed int64, err error) {
	out, err := exec.Command("iptables", "-w", "-L", p.chain, "-n", "-v", "-x").CombinedOutput()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("iptables -L %s: %v: %s", p.chain, err, strings.TrimSpace(string(out)))
	}
	var counts []int64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "DROP" {
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("iptables -L %s: %q", p.chain, line)
			}
			counts = append(counts, n)
		}
	}
	if len(counts) != 3 {
		return 0, 0, 0, fmt.Errorf("iptables -L %s: %d DROP rules, not 3:\n%s", p.chain, len(counts), out)
	}
	return counts[0], counts[1], counts[2], nil
}

func exists(chain string) bool {
	return exec.Command("iptables", "-w", "-n", "-L", chain).Run() == nil
}

// iptables runs iptables with -w (wait for the xtables lock that parallel tests
// and other programs take).
func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// peerPorts returns the ports member i uses to talk to the other members.
func (c *Cluster) peerPorts(i int) []int {
	n := len(c.Members)
	switch c.scheme {
	case "etcd":
		return []int{c.ports[n+i]}
	case "zk":
		return []int{c.ports[n+i], c.ports[2*n+i]}
	}
	return nil
}
