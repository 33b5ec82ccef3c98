package driver

import "log/slog"

// LoggerUser is implemented by drivers whose backend client logs on its own
// (a failed dial, a reconnection, a session event). Package lock calls
// UseLogger once, from lock.New (and so lock.Open), with the logger given by
// lock.WithLogger, before any other call of the Locker reaches the driver;
// it is not called when the Locker has no logger.
//
// A driver routes its client's lines to logger, at Warn for what an operator
// must see (a server that stopped answering, a change of primary), Info for
// what explains it, and Debug for anything repeated per operation; without a
// logger it prints nothing. A driver shared by several Lockers logs to the
// logger it was given last. Lines must not carry credentials.
type LoggerUser interface {
	UseLogger(logger *slog.Logger)
}
