package etcddriver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/lock/internal/testserver"
)

// List reads the prefix in pages and names each held key once, however many
// contenders it has and wherever a page ends; it skips the tombstones and
// names that are no lock's.
func TestListPagesAndSkipsWhatIsNoLock(t *testing.T) {
	url := testserver.Etcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(strings.TrimPrefix(url, "etcd://"), ","),
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prefix := "/distlock-test/" + t.Name()
	d, err := New(c, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range []string{
		rangePrefix(prefix, "a") + "1", rangePrefix(prefix, "a") + "2", rangePrefix(prefix, "a") + "3",
		rangePrefix(prefix, "b/c") + "1",
		rangePrefix(prefix, "d") + "read/1", rangePrefix(prefix, "d") + "read/2",
		tombstoneKey(prefix, rangePrefix(prefix, "e")+"1", 7),
		prefix + "/not-a-range", prefix + "/bad%zz/1",
	} {
		if _, err := c.Put(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
	}
	defer c.Delete(context.Background(), prefix+"/", clientv3.WithPrefix())
	defer func(n int64) { listPage = n }(listPage)
	for _, page := range []int64{1, 2, 3, 1000} {
		listPage = page
		got, err := d.List(ctx, "")
		if want := []string{"a", "b/c", "d"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("List with pages of %d = %q, %v; want %q", page, got, err, want)
		}
	}
}
