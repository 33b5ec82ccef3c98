package filedriver

// Dir returns the directory that holds the lock files (the prefix
// subdirectory), for tests that look at or tamper with them.
func (d *Driver) Dir() string { return d.dir }

// Sever closes every lock file descriptor d holds, as the kernel does when
// the process dies: the conformance harness's Sever (see sever).
func (d *Driver) Sever() { d.sever() }
