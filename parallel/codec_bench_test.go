package parallel

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// BenchmarkCodec reports encode and decode throughput (GB/s of float32 input) of every
// codec on a 4 Mi-element vector (16 MiB):
//
//	go test -run '^$' -bench Codec ./parallel
func BenchmarkCodec(b *testing.B) {
	const n = 4 << 20
	x := randVec(n, 1)
	for _, name := range []jobspec.Codec{jobspec.CodecNone, jobspec.CodecFP16, jobspec.CodecInt8, jobspec.CodecTopK} {
		c, _ := NewCodec(name, 0.01)
		payload := c.Encode(nil, x)
		b.Run(string(name)+"/encode", func(b *testing.B) {
			b.SetBytes(4 * n)
			buf := make([]byte, 0, len(payload))
			for i := 0; i < b.N; i++ {
				buf = c.Encode(buf[:0], x)
			}
		})
		b.Run(string(name)+"/decode", func(b *testing.B) {
			b.SetBytes(4 * n)
			y := make([]float32, n)
			for i := 0; i < b.N; i++ {
				if err := c.Decode(y, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
