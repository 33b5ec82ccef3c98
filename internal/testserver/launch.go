package testserver

import "fmt"

// Launch starts a private server outside a test, for programs that are not tests
// (the side-by-side benchmark command in bench/). kind is "redis", "postgres",
// "etcd" or "zookeeper"; args are as for StartRedis, StartPostgres, StartEtcd and
// StartZooKeeper. The server runs with the CPU affinity of the process at the
// time of the call. The caller stops it with Close, and calls Shutdown once it
// has closed every server it launched.
func Launch(kind string, args ...string) (*Server, error) {
	b, ok := map[string]*backend{
		"redis": redisBackend, "postgres": postgresBackend,
		"etcd": etcdBackend, "zookeeper": zookeeperBackend,
	}[kind]
	if !ok {
		return nil, fmt.Errorf("testserver: unknown server kind %q (redis, postgres, etcd, zookeeper)", kind)
	}
	return b.start(args)
}

// Close stops a server that Launch started and removes its directory.
func (s *Server) Close() { s.close() }

// Shutdown ends the thread that started the servers Launch made; call it after
// closing them all.
func Shutdown() { stopSpawner() }

// LaunchCluster starts a cluster of n members outside a test, as Launch does a
// server: kind is "etcd" or "zookeeper"; args go to every member. The caller
// stops it with Close.
func LaunchCluster(kind string, n int, args ...string) (*Cluster, error) {
	switch kind {
	case "etcd":
		return startEtcdCluster(n, args)
	case "zookeeper":
		return startZooKeeperEnsemble(n, args)
	}
	return nil, fmt.Errorf("testserver: unknown cluster kind %q (etcd, zookeeper)", kind)
}

// Close stops a cluster that LaunchCluster started and removes its directories.
func (c *Cluster) Close() { c.close() }
