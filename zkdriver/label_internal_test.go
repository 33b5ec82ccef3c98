package zkdriver

import "testing"

// Relabel's token field goes in and out of a JSON label unchanged; any other
// data is a label as it is.
func TestTokenFieldRoundTripsAndLeavesOtherDataAlone(t *testing.T) {
	for _, label := range []string{
		`{"owner":"a","since":1}`,
		`{"owner":"a","since":1,"value":"x,\"token\":5"}`,
		`{"owner":"a,\"token\":5}","since":2}`,
	} {
		data := withToken(label, 42)
		if got, tok := splitToken(data); got != label || tok != 42 {
			t.Errorf("splitToken(withToken(%s, 42)) = %s, %d", label, got, tok)
		}
		if got, tok := splitToken(label); got != label || tok != 0 {
			t.Errorf("splitToken(%s) = %s, %d; want it unchanged, no token", label, got, tok)
		}
	}
	for _, foreign := range []string{"", "10.0.0.7", "{}", "{not json", `x,"token":5}`} {
		if got := withToken(foreign, 7); got != foreign {
			t.Errorf("withToken(%q) = %q, want it unchanged", foreign, got)
		}
		if got, tok := splitToken(foreign); got != foreign || tok != 0 {
			t.Errorf("splitToken(%q) = %q, %d; want it unchanged, no token", foreign, got, tok)
		}
	}
}
