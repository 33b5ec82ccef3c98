package redisproto

import "strings"

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// Slot is the Cluster hash slot of key, as the server computes it: CRC16
// (XMODEM) of the key's hash tag (the text between the first '{' and the next
// '}', when not empty) or of the whole key, modulo SlotCount. A Lua script's
// keys must share one slot, so callers that put many locks in one script
// group them by it.
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % SlotCount
}
