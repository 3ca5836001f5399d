package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves, the other 68 map to U+0100.. in byte order, so every
// byte string is a printable string of the same length in runes.
var byteToRune [256]rune

// runeToByte inverts byteToRune over U+0000..U+0143 (-1: not in the alphabet).
var runeToByte [0x144]int16

func init() {
	n := 0
	for b := range 256 {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
	}
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	for b, r := range byteToRune {
		runeToByte[r] = int16(b)
	}
}

// byteLevelEncode maps raw bytes to the byte-level alphabet (what tokenizer.json's vocab
// holds).
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}

// byteLevelDecode maps a token string back to raw bytes as the ByteLevel decoder of
// Hugging Face's tokenizers does: rune by rune through the alphabet, or, when any rune is
// outside it, the string's own UTF-8 bytes. ok reports whether the alphabet applied.
func byteLevelDecode(s string) (raw []byte, ok bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return []byte(s), false
		}
		out = append(out, byte(runeToByte[r]))
	}
	return out, true
}
