module github.com/distlock/lock

go 1.21

require go.uber.org/goleak v1.3.0
