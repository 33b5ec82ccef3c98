package lock_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/memdriver"
)

// TestOwnerIDsAreDistinctHexAcrossCallsAndLockers reads the owner ids the
// backend stores for holds of several calls of two Lockers: each is 25 to 40
// characters of [0-9a-f] (what drivers rely on), none repeats, the calls of
// one Locker share its 24-digit prefix and the two Lockers' prefixes differ.
func TestOwnerIDsAreDistinctHexAcrossCallsAndLockers(t *testing.T) {
	ctx := context.Background()
	const store = "owner-ids"
	inspector := memdriver.New(store)
	defer inspector.Close()
	format := regexp.MustCompile(`^[0-9a-f]{25,40}$`)
	seen := map[string]bool{}
	var prefixes []string
	for i := range 2 {
		lk := lock.New(memdriver.New(store))
		prefix := ""
		for k := range 20 {
			key := fmt.Sprintf("owners/%d/%d", i, k)
			l, err := lk.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			in, err := inspector.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(in.Holders) != 1 {
				t.Fatalf("%s: %d holders, want 1", key, len(in.Holders))
			}
			id := in.Holders[0].Owner
			if !format.MatchString(id) {
				t.Fatalf("owner id %q is not 25 to 40 characters of [0-9a-f]", id)
			}
			if seen[id] {
				t.Fatalf("owner id %q given twice", id)
			}
			seen[id] = true
			if prefix == "" {
				prefix = id[:24]
			} else if id[:24] != prefix {
				t.Fatalf("owner ids of one Locker have prefixes %q and %q", prefix, id[:24])
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		prefixes = append(prefixes, prefix)
		if err := lk.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if prefixes[0] == prefixes[1] {
		t.Fatalf("two Lockers drew the same owner id prefix %q", prefixes[0])
	}
}
