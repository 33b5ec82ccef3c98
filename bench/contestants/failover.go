package contestants

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/lock"

	"github.com/distlock/lock/bench/harness"
)

// The failover scenario's TTLs: etcd's minimum lease, and for ZooKeeper the
// smallest session timeout a stock server grants (2 ticks of 2 s; our test
// server would grant less, but users' servers do not).
const (
	failoverTTL   = 2 * time.Second
	failoverZkTTL = 4 * time.Second
)

// electionLabel is etcd's own election, the reference of the failover table.
const electionLabel = "concurrency.Election"

// oursElector is our Campaign on the driver at rawURL, leadership refreshed
// with the TTL (ZooKeeper: its session timeout set to it too).
func oursElector(backend, rawURL string) *harness.Elector {
	ttl := failoverTTL
	if backend == ZooKeeper {
		ttl = failoverZkTTL
		sep := "?"
		if strings.Contains(rawURL, "?") {
			sep = "&"
		}
		rawURL += sep + "session_timeout=" + ttl.String()
	}
	return &harness.Elector{TTL: ttl, Open: func(ctx context.Context) (harness.Campaigner, error) {
		lk, err := lock.Open(ctx, rawURL, lock.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return oursCampaigner{lk}, nil
	}}
}

type oursCampaigner struct{ lk *lock.Locker }

func (o oursCampaigner) Campaign(ctx context.Context, name string) (uint64, func(context.Context) error, error) {
	ld, err := o.lk.Campaign(ctx, name, "lockbench")
	if err != nil {
		return 0, nil, err
	}
	if !o.lk.Capabilities().Fencing {
		return 0, ld.Resign, nil // no term to compare (Token would panic)
	}
	return ld.Token(), ld.Resign, nil
}

func (o oursCampaigner) Close() error { return o.lk.Close() }

// etcdElectionContestant is etcd's concurrency.Election with a session TTL
// of 2 s, in the failover scenario only. Its term is the revision of the
// leader's key, which grows with every new leader.
func etcdElectionContestant(url string, srv *harness.Server) *harness.Contestant {
	na := map[harness.Scenario]string{}
	for _, s := range harness.Scenarios {
		if s != harness.Failover {
			na[s] = "leader election: in the failover section only"
		}
	}
	return &harness.Contestant{
		Backend: Etcd, Name: electionLabel, Setting: fmt.Sprintf("session TTL %v", failoverTTL), Role: harness.Peer,
		NA: na, Server: srv,
		Elector: &harness.Elector{TTL: failoverTTL, Open: func(ctx context.Context) (harness.Campaigner, error) {
			c, err := newEtcdClient(url)
			if err != nil {
				return nil, err
			}
			return &etcdCampaigner{c: c}, nil
		}},
	}
}

type etcdCampaigner struct{ c *clientv3.Client }

func (e *etcdCampaigner) Campaign(ctx context.Context, name string) (uint64, func(context.Context) error, error) {
	s, err := concurrency.NewSession(e.c, concurrency.WithTTL(int(failoverTTL/time.Second)))
	if err != nil {
		return 0, nil, err
	}
	el := concurrency.NewElection(s, "/bench-election/"+name)
	if err := el.Campaign(ctx, "lockbench"); err != nil {
		_ = s.Close()
		return 0, nil, err
	}
	return uint64(el.Rev()), func(ctx context.Context) error {
		err := el.Resign(ctx)
		_ = s.Close()
		return err
	}, nil
}

func (e *etcdCampaigner) Close() error { return e.c.Close() }
