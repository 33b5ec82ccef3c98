package memdriver

// Waiting returns how many Acquire calls wait in key's queue, so tests can
// wait for a request to have arrived instead of sleeping.
func (d *Driver) Waiting(key string) int {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if ks := d.s.keys[d.key(key)]; ks != nil {
		return len(ks.queue)
	}
	return 0
}
