package zkdriver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

func BenchmarkContendedRaw(b *testing.B) {
	url := testserver.ZooKeeper(b)
	var ds []driver.Driver
	for range benchClients {
		_, d := mustOpen(b, url+"?prefix=rawbench")
		ds = append(ds, d)
	}
	key := fmt.Sprintf("contended-raw-%d", b.N)
	ctx := context.Background()
	contend(b, func(g int) func() error {
		d := ds[g%benchClients].(driver.Acquirer)
		dd := ds[g%benchClients]
		return func() error {
			var o [16]byte
			rand.Read(o[:])
			req := &driver.Request{Key: key, Owner: hex.EncodeToString(o[:]), Lost: func(error) {}}
			if _, err := d.Acquire(ctx, req); err != nil {
				return err
			}
			return dd.Release(ctx, req)
		}
	})
}

func BenchmarkUncontended(b *testing.B) {
	url := testserver.ZooKeeper(b)
	ctx := context.Background()
	b.Run("driver=zkdriver", func(b *testing.B) {
		lk, _ := mustOpen(b, url+"?prefix=unc")
		for i := 0; i < b.N; i++ {
			l, err := lk.Acquire(ctx, "hot")
			if err != nil {
				b.Fatal(err)
			}
			l.Release(ctx)
		}
	})
	b.Run("driver=raw", func(b *testing.B) {
		_, d := mustOpen(b, url+"?prefix=unc")
		for i := 0; i < b.N; i++ {
			req := &driver.Request{Key: "hot2", Owner: fmt.Sprint(i), Lost: func(error) {}}
			if _, err := d.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			d.Release(ctx, req)
		}
	})
	b.Run("driver=zk.Lock", func(b *testing.B) {
		conn := zkConn(b, url)
		zl := zk.NewLock(conn, "/unc-zklock/hot", zk.WorldACL(zk.PermAll))
		for i := 0; i < b.N; i++ {
			if err := zl.Lock(); err != nil {
				b.Fatal(err)
			}
			zl.Unlock()
		}
	})
}
