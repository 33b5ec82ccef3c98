// Package fencetest holds the tests of package fence against SQLite (through
// modernc.org/sqlite, a pure-Go driver) and MariaDB (through
// github.com/go-sql-driver/mysql). It is a module of its own so that those
// drivers stay out of the module graph of every program that imports distlock;
// nothing imports it. The PostgreSQL tests live in the pgadvisory module, which
// already requires pgx.
package fencetest
