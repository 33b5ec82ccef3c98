package conformance

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/lock"
)

func (e *env) needShared() {
	if !e.caps.Shared {
		e.Skip("driver declares no shared locks (Capabilities.Shared is false); BadOptionsAreRejected checks WithShared is refused")
	}
}

// sharedJoinBound is how long an Acquire of a shared lock may take while only
// shared holders hold the key: a round trip or two, far less on a sound driver.
const sharedJoinBound = 5 * time.Second

// Shared holders from several clients hold the key at the same time: each one
// takes it while the others still hold it, by TryAcquire and by Acquire.
func testSharedHoldersRunTogether(e *env) {
	e.needShared()
	const holders = 4
	var held []*lock.Lock
	for i := 0; i < holders; i++ {
		lk := e.client(lock.WithShared(true))
		var l *lock.Lock
		var err error
		if i%2 == 0 {
			l, err = lk.TryAcquire(e.ctx, e.key)
		} else {
			ctx, cancel := context.WithTimeout(e.ctx, sharedJoinBound)
			l, err = lk.Acquire(ctx, e.key)
			cancel()
		}
		if err != nil {
			e.Fatalf("shared holder %d while %d others hold the key: %v", i+1, len(held), err)
		}
		held = append(held, l)
	}
	for _, l := range held {
		e.release(l)
	}
}

// Readers and writers from several clients on one key, counted independently
// of the driver: a writer is always alone, a reader never beside a writer, and
// every critical section runs.
func testExclusiveAndSharedExcludeEachOther(e *env) {
	e.needShared()
	const clients, goroutines, rounds = 4, 3, 10
	var (
		readers, writers atomic.Int32
		count            atomic.Int32
		book             failures
		wg               sync.WaitGroup
	)
	for c := 0; c < clients; c++ {
		lk := e.client()
		for g := 0; g < goroutines; g++ {
			shared := (c+g)%3 != 0 // two readers to one writer
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := lk.Acquire(e.ctx, e.key, lock.WithShared(shared))
					if err != nil {
						book.add("Acquire(shared=%v): %v", shared, err)
						return
					}
					if shared {
						readers.Add(1)
						if w := writers.Load(); w != 0 {
							book.add("a reader holds the key beside %d writers", w)
						}
					} else {
						if w := writers.Add(1); w != 1 {
							book.add("%d writers hold the key at once", w)
						}
						if n := readers.Load(); n != 0 {
							book.add("a writer holds the key beside %d readers", n)
						}
					}
					count.Add(1)
					runtime.Gosched()
					if shared {
						readers.Add(-1)
					} else {
						writers.Add(-1)
					}
					if err := l.Release(e.ctx); err != nil {
						book.add("Release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	book.report(e)
	if want := clients * goroutines * rounds; int(count.Load()) != want {
		e.Errorf("%d critical sections ran, want %d", count.Load(), want)
	}
}

// failures collects what goroutines of a property saw go wrong.
type failures struct {
	mu   sync.Mutex
	msgs []string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// report fails e with the first ten failures.
func (f *failures) report(e *env) {
	e.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.msgs {
		if i == 10 {
			e.Errorf("... and %d more failures", len(f.msgs)-i)
			break
		}
		e.Error(m)
	}
}

// Stream and bound of WriterIsNotStarvedByAStreamOfReaders.
const (
	// readerEvery is how often a new reader arrives, readerHold how long each
	// holds the key: about five readers overlap at any time, so without writer
	// preference the key is never free of readers while the stream lasts.
	readerEvery = 4 * time.Millisecond
	readerHold  = 20 * time.Millisecond
	// readersInFlight caps the readers of the stream between the start of
	// their Acquire and the end of their Release; an arrival that finds the
	// cap reached is skipped. Above the five that overlap when the machine
	// keeps up, so the stream is unchanged then; on a loaded machine,
	// arrivals every 4ms whatever the machine can serve piled up readers
	// ahead of the writer (tens of them, each one it had to wait for, waits
	// of 0.4-2.8s at load 12; 779ms in a CI run of pgadvisory), which
	// measured the machine's backlog, not whether later readers went first.
	readersInFlight = 8
	// WriterWaitBound is the longest a writer may wait for the key under a
	// stream of readers, on drivers that declare writer preference: a sound
	// driver makes it wait for the few readers ahead of it (mem: 25ms, 170ms at
	// worst under -race on a loaded machine). It is well below the shorter
	// stream, so a writer that waits for the stream to end fails it.
	WriterWaitBound = 750 * time.Millisecond
)

// A writer arriving while readers keep coming gets the key within
// WriterWaitBound, whether the stream lasts one second or three: the readers
// that arrive after it wait behind it. The worst wait is logged as
// "figure writer-wait-under-reader-stream".
func testWriterIsNotStarvedByAStreamOfReaders(e *env) {
	e.needShared()
	if !e.caps.WriterPreference {
		e.Skip("driver declares no writer preference (Capabilities.WriterPreference is false): a stream of readers may starve a writer there")
	}
	short := e.writerWaitUnderStream(time.Second)
	long := e.writerWaitUnderStream(3 * time.Second)
	e.figure("writer-wait-under-reader-stream", max(short, long))
	for _, c := range []struct {
		stream, wait time.Duration
	}{{time.Second, short}, {3 * time.Second, long}} {
		if c.wait > WriterWaitBound {
			e.Errorf("a writer waited %v under a %v stream of readers, want at most %v: readers that arrived after it went first", c.wait, c.stream, WriterWaitBound)
		}
	}
	if long > short+time.Second {
		e.Errorf("the writer's wait grew with the stream: %v under 1s, %v under 3s", short, long)
	}
}

// writerWaitUnderStream runs a stream of readers for d on a fresh key, and a
// writer that takes the key again and again while the stream is busy; it
// returns the writer's longest wait.
func (e *env) writerWaitUnderStream(d time.Duration) time.Duration {
	e.Helper()
	key := fmt.Sprintf("%s/%v", e.key, d)
	var (
		readers, writers atomic.Int32
		book             failures
		wg               sync.WaitGroup
	)
	busy := make(chan struct{}, 1) // a reader saw another one beside it
	clients := []*lock.Locker{e.client(lock.WithShared(true)), e.client(lock.WithShared(true)), e.client(lock.WithShared(true))}
	inFlight := make(chan struct{}, readersInFlight)
	read := func(lk *lock.Locker) {
		defer wg.Done()
		defer func() { <-inFlight }()
		l, err := lk.Acquire(e.ctx, key)
		if err != nil {
			book.add("reader Acquire: %v", err)
			return
		}
		if n := readers.Add(1); n >= 2 {
			select {
			case busy <- struct{}{}:
			default:
			}
		}
		if w := writers.Load(); w != 0 {
			book.add("a reader holds the key beside the writer")
		}
		time.Sleep(readerHold) // the reader's work, not an ordering
		readers.Add(-1)
		if err := l.Release(e.ctx); err != nil {
			book.add("reader Release: %v", err)
		}
	}
	end := time.Now().Add(d)
	streamDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(streamDone)
		t := time.NewTicker(readerEvery)
		defer t.Stop()
		for i := 0; time.Now().Before(end); i++ {
			select {
			case inFlight <- struct{}{}:
				wg.Add(1)
				go read(clients[i%len(clients)])
			default: // readersInFlight reached: this arrival is skipped
			}
			select {
			case <-t.C:
			case <-e.ctx.Done():
				return
			}
		}
	}()

	w := e.client()
	var worst time.Duration
	samples := 0
	for {
		// Each sample starts while at least two readers hold the key.
		select {
		case <-busy:
		case <-streamDone:
		}
		if time.Until(end) < readerHold*2 {
			break
		}
		start := time.Now()
		l, err := w.Acquire(e.ctx, key)
		if err != nil {
			e.Errorf("writer Acquire: %v", err)
			break
		}
		worst = max(worst, time.Since(start))
		samples++
		writers.Add(1)
		if n := readers.Load(); n != 0 {
			book.add("the writer holds the key beside %d readers", n)
		}
		writers.Add(-1)
		if err := l.Release(e.ctx); err != nil {
			e.Errorf("writer Release: %v", err)
			break
		}
		select { // drop a signal from before this sample
		case <-busy:
		default:
		}
	}
	wg.Wait()
	book.report(e)
	if samples == 0 {
		e.Fatalf("the writer never took the key during a %v stream of readers", d)
	}
	e.Logf("%v stream: the writer took the key %d times, longest wait %v", d, samples, worst)
	return worst
}
