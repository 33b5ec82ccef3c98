package redisproto

import "testing"

// The slots are the server's: CRC16/XMODEM's check value for "123456789" is
// 0x31C3, and the hash tag rules are those of the Cluster specification
// (the driver's cluster tests check its keys against CLUSTER KEYSLOT).
func TestSlotIsTheClusterSlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % SlotCount},
		{"", 0},
		{"{123456789}", 0x31C3 % SlotCount},
		{"P:{123456789}:fence", 0x31C3 % SlotCount},
		{"a{123456789}{x}", 0x31C3 % SlotCount},
	} {
		if got := Slot(c.key); got != c.want {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	if Slot("{}123456789") == Slot("123456789") {
		t.Error("an empty hash tag must hash the whole key, not the text after it")
	}
}
