// Package redistest runs gocronlock's two-process scenarios (real gocron
// schedulers in two processes) on a real Redis. It is a module of its own so
// that gocronlock's importers do not get go-redis in their module graph
// through a test-only requirement.
package redistest
