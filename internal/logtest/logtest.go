// Package logtest is a log/slog handler for tests that keeps the records it
// is given, so that a test can wait for a line and count lines.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// A Recorder is a slog.Handler that keeps every record at any level (with
// the attributes given to With, and without groups, which the code under
// test does not use).
type Recorder struct {
	mu      sync.Mutex
	records []Record
	changed chan struct{} // closed and replaced at each record
}

// A Record is one kept line.
type Record struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// String renders a record for failure messages.
func (r Record) String() string { return fmt.Sprintf("%s %q %v", r.Level, r.Message, r.Attrs) }

// New returns an empty Recorder.
func New() *Recorder { return &Recorder{changed: make(chan struct{})} }

// Logger returns a logger writing to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled implements slog.Handler: every level is.
func (*Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	kept := Record{Level: rec.Level, Message: rec.Message, Attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		kept.Attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.records = append(r.records, kept)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not kept.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler; groups are not kept.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Matching returns the records for which ok is true.
func (r *Recorder) Matching(ok func(Record) bool) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for _, rec := range r.records {
		if ok(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// All returns every record, rendered, for failure messages.
func (r *Recorder) All() string {
	var b strings.Builder
	for _, rec := range r.Matching(func(Record) bool { return true }) {
		b.WriteString(rec.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Wait waits until a record for which ok is true arrives, or d passes, and
// returns it (ok false when none came).
func (r *Recorder) Wait(d time.Duration, ok func(Record) bool) (Record, bool) {
	got := r.WaitN(d, 1, ok)
	if len(got) == 0 {
		return Record{}, false
	}
	return got[0], true
}

// WaitN waits until n records for which ok is true have arrived, or d
// passes, and returns those that did.
func (r *Recorder) WaitN(d time.Duration, n int, ok func(Record) bool) []Record {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		got := r.Matching(ok)
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			return got
		}
	}
}

// Message matches records with message m.
func Message(m string) func(Record) bool {
	return func(r Record) bool { return r.Message == m }
}
