package contestants

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/distlock/lock/bench/harness"
)

const mutexLabel = "concurrency.Mutex (default)"

func etcdContestants(url string, srv *harness.Server) []*harness.Contestant {
	return []*harness.Contestant{
		oursContestant(Etcd, url, srv, true),
		rawEtcdContestant(url, srv),
		etcdMutexContestant(url, srv),
		etcdRWMutexContestant(url, srv),
		etcdElectionContestant(url, srv),
	}
}

// etcdServer describes an etcd server: its port and the gRPC messages it has
// received (requests, and lease keep-alives on their streams), from /metrics.
func etcdServer(url string) (*harness.Server, error) {
	h, ports, err := hostAndPorts(url)
	if err != nil {
		return nil, err
	}
	return &harness.Server{Ports: ports, Requests: func(ctx context.Context) (int64, error) {
		return etcdMessages(ctx, "http://"+h+"/metrics")
	}}, nil
}

// etcdMessages sums grpc_server_msg_received_total over every method.
func etcdMessages(ctx context.Context, metrics string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metrics, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("etcd metrics: %q: %w", line, err)
		}
		total += v
	}
	return int64(total), s.Err()
}

// newEtcdClient opens a client on an etcd://host:port URL.
func newEtcdClient(url string) (*clientv3.Client, error) {
	h, err := hostOf(url)
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints: []string{"http://" + h}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
}

// rawEtcd is the floor of any etcd lock: one write to take (a Put) and one to
// give back (a Delete), each fsynced by the server. No exclusion at all, so it
// runs only where keys are free.
type rawEtcd struct{ c *clientv3.Client }

func rawEtcdContestant(url string, srv *harness.Server) *harness.Contestant {
	return &harness.Contestant{
		Backend: Etcd, Name: floorName, Setting: "Put + Delete", Role: harness.Floor,
		TryUncontended: true, Server: srv,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			c, err := newEtcdClient(url)
			if err != nil {
				return nil, err
			}
			return rawEtcd{c}, nil
		},
		NA: map[harness.Scenario]string{
			harness.Contended: "a plain Put excludes nobody",
			harness.Held:      "a plain Put has no lease to keep alive",
		},
	}
}

func (r rawEtcd) Acquire(ctx context.Context, key string) (harness.Release, error) {
	return r.TryAcquire(ctx, key)
}

func (r rawEtcd) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	k := "/bench-raw/" + key
	if _, err := r.c.Put(ctx, k, nextOwner()); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := r.c.Delete(ctx, k)
		return err
	}, nil
}

func (r rawEtcd) Close() error { return r.c.Close() }

// etcdMutex is etcd's own client/v3/concurrency.Mutex at its defaults (session
// TTL 60 s, kept alive by the client). Two goroutines must not share a
// session on one key (the Mutex would let both in), so a client keeps a
// session per concurrent use of a key: one session serves any number of
// distinct keys, and the contended scenario's goroutines get one each.
type etcdMutex struct {
	c   *clientv3.Client
	ttl int // session TTL in seconds; 0 for the default

	mu       sync.Mutex
	sessions []*mutexSession
}

type mutexSession struct {
	s    *concurrency.Session
	keys map[string]bool // keys in use on this session
}

func etcdMutexContestant(url string, srv *harness.Server) *harness.Contestant {
	return &harness.Contestant{
		Backend: Etcd, Name: "concurrency.Mutex", Setting: "default", Role: harness.Peer,
		TryUncontended: true, Refreshes: true, Server: srv, NoLateness: noLatenessEtcd,
		Open: func(ctx context.Context, ttl time.Duration) (harness.Client, error) {
			c, err := newEtcdClient(url)
			if err != nil {
				return nil, err
			}
			return &etcdMutex{c: c, ttl: int((ttl + time.Second - 1) / time.Second)}, nil
		},
	}
}

// session returns a session on which key is not in use, marking it in use.
func (e *etcdMutex) session(key string) (*mutexSession, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if !s.keys[key] {
			s.keys[key] = true
			return s, nil
		}
	}
	var opts []concurrency.SessionOption
	if e.ttl > 0 {
		opts = append(opts, concurrency.WithTTL(e.ttl))
	}
	s, err := concurrency.NewSession(e.c, opts...)
	if err != nil {
		return nil, err
	}
	ms := &mutexSession{s: s, keys: map[string]bool{key: true}}
	e.sessions = append(e.sessions, ms)
	return ms, nil
}

func (e *etcdMutex) done(s *mutexSession, key string) {
	e.mu.Lock()
	delete(s.keys, key)
	e.mu.Unlock()
}

func (e *etcdMutex) Acquire(ctx context.Context, key string) (harness.Release, error) {
	rel, _, err := e.take(ctx, key, func(m *concurrency.Mutex) error { return m.Lock(ctx) })
	return rel, err
}

// AcquireWatched implements harness.Watcher: a Mutex is lost when its
// session's lease is, which closes the session's Done channel.
func (e *etcdMutex) AcquireWatched(ctx context.Context, key string) (harness.Release, harness.Loss, error) {
	rel, done, err := e.take(ctx, key, func(m *concurrency.Mutex) error { return m.Lock(ctx) })
	return rel, harness.Loss{Done: done}, err
}

var _ harness.Watcher = (*etcdMutex)(nil)

func (e *etcdMutex) TryAcquire(ctx context.Context, key string) (harness.Release, error) {
	rel, _, err := e.take(ctx, key, func(m *concurrency.Mutex) error {
		err := m.TryLock(ctx)
		if errors.Is(err, concurrency.ErrLocked) {
			return harness.ErrBusy
		}
		return err
	})
	return rel, err
}

// take locks key's Mutex on a session where key is not in use, and returns
// its release and the session's Done channel.
func (e *etcdMutex) take(ctx context.Context, key string, lock func(*concurrency.Mutex) error) (harness.Release, <-chan struct{}, error) {
	s, err := e.session(key)
	if err != nil {
		return nil, nil, err
	}
	m := concurrency.NewMutex(s.s, "/bench-mutex/"+key)
	if err := lock(m); err != nil {
		e.done(s, key)
		return nil, nil, err
	}
	return func(ctx context.Context) error {
		defer e.done(s, key)
		return m.Unlock(ctx)
	}, s.s.Done(), nil
}

func (e *etcdMutex) Close() error {
	e.mu.Lock()
	for _, s := range e.sessions {
		_ = s.s.Close()
	}
	e.sessions = nil
	e.mu.Unlock()
	return e.c.Close()
}
