module github.com/distlock/lock/zkdriver

go 1.25.0

replace github.com/distlock/lock v0.0.0-00010101000000-000000000000 => ..

require (
	github.com/distlock/lock v0.0.0-00010101000000-000000000000
	github.com/go-zookeeper/zk v1.0.4
)
