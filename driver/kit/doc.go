// Package kit holds the mechanisms that drivers of package driver share, so
// that a driver keeps only what is its own: its backend's protocol, its
// session handling and its key layout. It imports only the standard library
// and package driver, so a third-party driver may use it too.
//
//   - [Calls] and [Run] run a call of a client library that takes no context
//     so that its caller can give up when its context ends, and the call's
//     outcome is cleaned up afterwards ([Handoff]).
//   - [Round] shares one liveness round trip among the refresh batches that
//     asked for it before it was sent.
//   - [LogSink] passes a client library's log lines to a *slog.Logger, at a
//     level chosen from a table the driver gives.
//   - [TombstoneLife] is how long a ForceRelease tombstone lives.
//   - [Book] is a driver's table of held locks and its closed gate, and the
//     mutex that guards them with the driver's own state.
package kit
