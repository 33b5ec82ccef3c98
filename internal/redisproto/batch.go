package redisproto

import "fmt"

// RefreshBatch is the most locks one refresh script call extends, in both
// drivers. A script blocks its server while it runs (about a microsecond per
// lock), so a call is bounded; larger calls save nothing that counts (one
// EVALSHA per 256 locks is 0.2% of the commands). Batching is what lets one
// client keep tens of thousands of locks: a command per lock per refresh
// costs the server a round of parsing and a reply each, and the client a job
// each in its queues.
const RefreshBatch = 256

// Codes reads a batch script's answer: one integer per lock of the call, n
// of them. Anything else is an error naming what came back.
func Codes(v any, n int) ([]int64, error) {
	vs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("refresh script answered %T, not a list", v)
	}
	if len(vs) != n {
		return nil, fmt.Errorf("refresh script answered %d results for %d locks", len(vs), n)
	}
	out := make([]int64, n)
	for i, x := range vs {
		c, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("refresh script answered %T for a lock, not an integer", x)
		}
		out[i] = c
	}
	return out, nil
}
