// Package telemetrytest tests distlock's OpenTelemetry instrumentation with the
// OpenTelemetry SDK's in-memory reader and span recorder. It is a module of its
// own so that the SDK, which only these tests need, never enters the graph of a
// program that imports distlock (a module's test-only requirements are in its
// go.mod, hence in every importer's graph).
package telemetrytest
