package filedriver

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// The fencing counter is the lock file's content: the last token granted, in
// decimal, then a newline, so an operator can read it with cat. Only the flock
// holder reads and writes it, and it is synced to disk before the token is handed
// out, so tokens keep increasing across holders, processes, restarts and crashes.
// An empty file (just created) counts as 0, so the first token is 1.

// maxCounterLen is more than the 20 digits of the largest uint64 plus a newline;
// a longer file is not a counter.
const maxCounterLen = 32

// nextToken increments the counter in f, which must be flocked, and returns the
// new value. A file that does not hold a counter is left untouched and reported:
// granting a token that might not exceed an earlier one would defeat fencing.
func nextToken(f *os.File) (uint64, error) {
	var buf [maxCounterLen]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("filedriver: read fencing counter: %w", err)
	}
	var last uint64
	if n > 0 {
		last, err = strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
		if err != nil || n == len(buf) || last == math.MaxUint64 {
			return 0, fmt.Errorf("filedriver: %s does not hold a fencing counter (%q); refusing to grant a token that might not increase", f.Name(), buf[:n])
		}
	}
	next := last + 1
	out := strconv.AppendUint(make([]byte, 0, maxCounterLen), next, 10)
	out = append(out, '\n')
	if _, err := f.WriteAt(out, 0); err != nil {
		return 0, fmt.Errorf("filedriver: write fencing counter: %w", err)
	}
	if n > len(out) {
		if err := f.Truncate(int64(len(out))); err != nil {
			return 0, fmt.Errorf("filedriver: write fencing counter: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("filedriver: sync fencing counter: %w", err)
	}
	return next, nil
}
