module github.com/distlock/lock/internal/release

go 1.25.0

require golang.org/x/mod v0.35.0
