package zkdriver

import "testing"

// An empty prefix means DefaultPrefix, as in every driver; invalid UTF-8 is
// refused.
func TestEmptyPrefixMeansTheDefaultAndInvalidUTF8IsRefused(t *testing.T) {
	o := options{prefix: "set-before"}
	WithPrefix("")(&o)
	if o.err != nil || o.prefix != DefaultPrefix {
		t.Errorf("WithPrefix(\"\"): prefix %q, err %v; want %q and no error", o.prefix, o.err, DefaultPrefix)
	}
	o = options{}
	WithPrefix("\xff")(&o)
	if o.err == nil {
		t.Error("WithPrefix with invalid UTF-8 was accepted")
	}
}
