module github.com/distlock/lock/redlockdriver

go 1.25.0

require (
	github.com/distlock/lock v0.2.0
	github.com/distlock/lock/internal/redisproto v0.2.0
	github.com/distlock/lock/redisdriver v0.2.0
	github.com/redis/go-redis/v9 v9.22.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/distlock/lock => ..

replace github.com/distlock/lock/internal/redisproto => ../internal/redisproto

replace github.com/distlock/lock/redisdriver => ../redisdriver
