// Package telemetrytest tests distlock's OpenTelemetry instrumentation with the
// OpenTelemetry SDK's in-memory reader and span recorder. It is a module of its
// own so that the SDK, which only these tests need, never enters the graph of a
// program that imports distlock (a module's test-only requirements are in its
// go.mod, hence in every importer's graph).
//
// The scripted scenario (scenario_test.go) runs on mem and on Redis, where the
// losses come from real faults: the server frozen past the validity deadline,
// the lock key overwritten by another owner, an operator's ForceRelease. The
// module requires redisdriver for it; nothing imports this module.
package telemetrytest
