// Package cluster holds tests of what happens to a held lock when a real
// etcd cluster or ZooKeeper ensemble is partitioned: the holder's server is cut
// off from the others (testserver's Cluster.Partition, iptables rules) while
// the holder's client can still reach it, so the holder sits on the minority
// side and another client on the majority side waits for the same key.
//
// The tests need root and iptables (scripts/install-backends installs it);
// without them they are skipped, or fail with DISTLOCK_TEST_REQUIRE=1. They log
// their measurements as "figure <what> <backend> <duration>".
package cluster
