module github.com/distlock/lock

go 1.22

require go.uber.org/goleak v1.3.0
