module github.com/distlock/lock

go 1.25.0
