// Package check verifies a soak history: the fenced resource is linearizable
// (porcupine), fencing tokens grow in grant order per key, no write with a
// stale token is accepted, and no two holders' validity intervals overlap.
//
// The resource fences reads as well as writes, as a store guarded by fencing
// tokens must: a holder frozen between its read and its write (a GC pause, a
// SIGSTOP) would otherwise write back a value read before the next holder's
// read, and fencing the write alone cannot stop that lost update.
package check

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of a recorded operation.
type Kind string

const (
	Acquire Kind = "acquire"
	Release Kind = "release"
	// Releasing: the client decided to release the hold; it touches the
	// resource no more. It is recorded before the Release call, whose op
	// comes when the call returns: a Release may be retried for a while (a
	// server frozen), its first attempt may already have freed the lock for
	// another holder, and a client killed meanwhile leaves no Release op.
	Releasing Kind = "releasing"
	Lost      Kind = "lost"
	Write     Kind = "write"
	// Refresh: a refresh that succeeded; its ValidUntil extends the hold's.
	Refresh Kind = "refresh"
	// Forget: the backend lost every lock (restarted without its data).
	Forget Kind = "forget"
	// Read: a fenced read of the resource (Accepted: the token was not stale).
	Read Kind = "read"
	// Crash: the client's process was killed; its open holds end here.
	Crash Kind = "crash"
	// Fault: a fault the nemesis injected (Key names it), for the reader of
	// a history; the properties ignore it.
	Fault Kind = "fault"
)

// Op is one recorded operation. Times are nanoseconds on one clock shared by
// every process (the soak's processes run on one machine: CLOCK_REALTIME).
type Op struct {
	Kind   Kind   `json:"kind"`
	Client int    `json:"client"`
	Key    string `json:"key"`
	Token  uint64 `json:"token"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	// Hold numbers the holds of one client: an acquire, its writes and the
	// release or loss that ends it share it.
	Hold int `json:"hold"`
	// Write: the value read and whether the resource accepted the write.
	// Read: the value returned and whether the resource accepted the read.
	Value    int64 `json:"read,omitempty"`
	Accepted bool  `json:"accepted,omitempty"`
	// Late: an unfenced read or write that reached the resource after the
	// deadline its holder sent (the end of its validity), rejected for that.
	Late bool `json:"late,omitempty"`
	// Acquire: a lower bound of the end of the validity the holder was
	// given (its call + TTL - drift, the grant starting no earlier than the
	// call), or 0 when refreshes may extend it. A holder frozen past it and
	// releasing late did not hold the lock all that time.
	ValidUntil int64 `json:"valid_until,omitempty"`
}

// Violation is one broken property, with the operations that show it.
type Violation struct {
	Property string `json:"property"`
	Detail   string `json:"detail"`
	Ops      []Op   `json:"ops"`
}

func (v Violation) String() string {
	s := v.Property + ": " + v.Detail
	for _, o := range v.Ops {
		s += "\n  " + describe(o)
	}
	return s
}

func describe(o Op) string {
	s := fmt.Sprintf("client %d hold %d %s key=%s token=%d [%d..%d]", o.Client, o.Hold, o.Kind, o.Key, o.Token, o.Call, o.Return)
	if o.Kind == Write || o.Kind == Read {
		s += fmt.Sprintf(" value=%d accepted=%v", o.Value, o.Accepted)
	}
	return s
}

// Options tunes which properties apply.
type Options struct {
	// NoOverlap checks that validity intervals never overlap; only for
	// backends whose safety does not depend on clock rates beyond the drift.
	NoOverlap bool
	// Unfenced: the backend gives no fencing tokens (every token is 0), so
	// tokens are not checked; the resource then rejects what arrives after
	// its holder's validity instead.
	Unfenced bool
	// OutDir, if set, receives porcupine's HTML visualisation of a
	// non-linearizable key.
	OutDir string
	// Timeout bounds porcupine's search (0 = no bound).
	Timeout time.Duration
}

type state struct {
	max   uint64
	value int64
}

// in is a fenced operation on the register: a read, or a write of the value
// its writer read plus one.
type in struct {
	write bool
	token uint64
	read  int64 // write: the value its writer read
}

type out struct {
	value    int64 // read: the value returned
	accepted bool
}

// model is the fenced register. An operation whose token is at least the
// largest seen so far (by a read or a write) is accepted and raises it; any
// other is rejected and changes nothing. An accepted read returns the value;
// an accepted write must have read the current value (else an update was
// lost) and increments it.
var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Metadata.(string)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return state{} },
	Step: func(st, input, output interface{}) (bool, interface{}) {
		s, i, o := st.(state), input.(in), output.(out)
		if i.token < s.max {
			return !o.accepted, s
		}
		if !o.accepted {
			return false, s
		}
		if !i.write {
			return o.value == s.value, state{max: i.token, value: s.value}
		}
		return i.read == s.value, state{max: i.token, value: s.value + 1}
	},
	DescribeOperation: func(input, output interface{}) string {
		i, o := input.(in), output.(out)
		if i.write {
			return fmt.Sprintf("write token=%d read=%d accepted=%v", i.token, i.read, o.accepted)
		}
		return fmt.Sprintf("read token=%d value=%d accepted=%v", i.token, o.value, o.accepted)
	},
	DescribeState: func(st interface{}) string {
		s := st.(state)
		return fmt.Sprintf("max=%d value=%d", s.max, s.value)
	},
}

// Check runs every property over the history and returns the violations.
func Check(h []Op, opt Options) ([]Violation, error) {
	var vs []Violation
	var ops []porcupine.Operation
	for _, o := range h {
		if o.Late {
			continue // rejected for its deadline: no effect on the register
		}
		switch o.Kind {
		case Write:
			ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: in{write: true, token: o.Token, read: o.Value},
				Call: o.Call, Output: out{accepted: o.Accepted}, Return: o.Return, Metadata: o.Key})
		case Read:
			ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: in{token: o.Token},
				Call: o.Call, Output: out{value: o.Value, accepted: o.Accepted}, Return: o.Return, Metadata: o.Key})
		}
	}
	if len(ops) > 0 {
		res, info := porcupine.CheckOperationsVerbose(model, ops, opt.Timeout)
		switch res {
		case porcupine.Illegal:
			v := Violation{Property: "linearizable", Detail: "the fenced resource's history has no linearization"}
			// The longest partial linearization of each failing key is the
			// minimal interleaving porcupine can show.
			for _, part := range info.PartialLinearizationsOperations() {
				longest := []porcupine.Operation{}
				for _, l := range part {
					if len(l) > len(longest) {
						longest = l
					}
				}
				for _, w := range longest {
					i, o := w.Input.(in), w.Output.(out)
					op := Op{Kind: Read, Client: w.ClientId, Key: w.Metadata.(string), Token: i.token,
						Call: w.Call, Return: w.Return, Value: o.value, Accepted: o.accepted}
					if i.write {
						op.Kind, op.Value = Write, i.read
					}
					v.Ops = append(v.Ops, op)
				}
			}
			if opt.OutDir != "" {
				p := filepath.Join(opt.OutDir, "linearizability.html")
				if err := porcupine.VisualizePath(model, info, p); err != nil {
					return nil, err
				}
				v.Detail += "; visualisation in " + p
			}
			vs = append(vs, v)
		case porcupine.Unknown:
			return nil, fmt.Errorf("check: porcupine gave up after %v", opt.Timeout)
		}
	}
	if !opt.Unfenced {
		vs = append(vs, tokens(h)...)
		vs = append(vs, stale(h)...)
	}
	if opt.NoOverlap {
		vs = append(vs, overlaps(h)...)
	}
	return vs, nil
}

// tokens: a grant that returned before another was requested has a smaller token.
func tokens(h []Op) []Violation {
	var vs []Violation
	acq := byKey(h, Acquire)
	for _, as := range acq {
		sort.Slice(as, func(i, j int) bool { return as[i].Return < as[j].Return })
		for i := range as {
			for j := range as {
				if as[i].Return < as[j].Call && as[i].Token >= as[j].Token {
					vs = append(vs, Violation{Property: "tokens grow", Detail: "a later grant has a token not above an earlier one", Ops: []Op{as[i], as[j]}})
				}
			}
		}
	}
	return vs
}

// stale: an accepted write whose token is below one already accepted before
// it was invoked.
func stale(h []Op) []Violation {
	var vs []Violation
	for _, ws := range byKey(h, Write) {
		for _, a := range ws {
			for _, b := range ws {
				if a.Accepted && b.Accepted && a.Return < b.Call && b.Token < a.Token {
					vs = append(vs, Violation{Property: "no stale write", Detail: "a write with a smaller token was accepted after a larger one", Ops: []Op{a, b}})
				}
			}
		}
	}
	return vs
}

// overlaps: a holder certainly holds the lock from each confirmation it got
// (its acquire's or a refresh's return) to the earliest of: the call that
// ends the hold (release decided or invoked, or loss reported), the validity that
// confirmation gave (ValidUntil), and the first Forget that may have hit it (a
// backend restarted without its locks: holders' locks are gone, and only
// fencing protects the resource until they learn it). Two holders' segments
// on one key must not intersect. A hold of a client whose process was killed
// (Crash) ends at the kill at the latest.
func overlaps(h []Op) []Violation {
	type hk struct{ client, hold int }
	type seg struct {
		hold       hk
		from, to   int64
		start, end Op
	}
	var forgets []Op
	crashes := map[int]Op{}
	starts := map[hk]Op{}
	confirms := map[hk][]Op{}
	ends := map[hk]Op{}
	for _, o := range h {
		k := hk{o.Client, o.Hold}
		switch o.Kind {
		case Forget:
			forgets = append(forgets, o)
		case Crash:
			crashes[o.Client] = o
		case Acquire:
			starts[k] = o
			confirms[k] = append(confirms[k], o)
		case Refresh:
			confirms[k] = append(confirms[k], o)
		case Release, Releasing, Lost:
			if e, ok := ends[k]; !ok || o.Call < e.Call {
				ends[k] = o
			}
		}
	}
	segs := map[string][]seg{}
	for k, s := range starts {
		e, ended := ends[k]
		if c, ok := crashes[k.client]; ok && (!ended || c.Call < e.Call) {
			e, ended = c, true
		}
		for _, c := range confirms[k] {
			if c.Key != s.Key {
				continue // not this hold's lock
			}
			to := int64(math.MaxInt64)
			if ended {
				to = e.Call
			}
			if c.ValidUntil != 0 && c.ValidUntil < to {
				to = c.ValidUntil
			}
			for _, f := range forgets {
				if f.Return > c.Call && f.Call < to {
					to = f.Call
				}
			}
			if to == math.MaxInt64 || to <= c.Return {
				continue // no known end (nothing certain), or none left
			}
			if !ended {
				e = Op{Kind: Release, Client: s.Client, Hold: s.Hold, Key: s.Key, Call: to, Return: to}
			}
			segs[s.Key] = append(segs[s.Key], seg{k, c.Return, to, s, e})
		}
	}
	var vs []Violation
	for _, l := range segs {
		sort.Slice(l, func(i, j int) bool { return l[i].from < l[j].from })
		seen := map[[2]hk]bool{}
		for i := range l {
			for j := i + 1; j < len(l); j++ {
				a, b := l[i], l[j]
				if a.hold == b.hold || seen[[2]hk{a.hold, b.hold}] {
					continue
				}
				if a.from < b.to && b.from < a.to {
					seen[[2]hk{a.hold, b.hold}] = true
					vs = append(vs, Violation{Property: "no overlap", Detail: "two holders held the key at once", Ops: []Op{a.start, a.end, b.start, b.end}})
				}
			}
		}
	}
	return vs
}

func byKey(h []Op, k Kind) map[string][]Op {
	m := map[string][]Op{}
	for _, o := range h {
		if o.Kind == k {
			m[o.Key] = append(m[o.Key], o)
		}
	}
	return m
}
