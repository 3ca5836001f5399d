package tokenizer

import (
	"os"
	"testing"
)

// Benchmarks of encode and decode on one core, in MB/s of text. By default they run on
// testdata/unicode-sample.txt; MESHNODE_TOKENIZER_BENCH_TEXT and
// MESHNODE_TOKENIZER_BENCH_JSON point them at another text and tokenizer.json (docs/
// tokenizer.md has the 10 MB command):
//
//	go test ./tokenizer -run '^$' -bench . -benchtime 5x -cpu 1
func benchInputs(b *testing.B) ([]byte, []*Tokenizer) {
	text := readSample(b)
	if p := os.Getenv("MESHNODE_TOKENIZER_BENCH_TEXT"); p != "" {
		var err error
		if text, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
	if p := os.Getenv("MESHNODE_TOKENIZER_BENCH_JSON"); p != "" {
		tok, err := Load(p)
		if err != nil {
			b.Fatal(err)
		}
		return text, []*Tokenizer{tok}
	}
	return text, []*Tokenizer{loadTestTokenizer(b, goldenCases[0]), loadTestTokenizer(b, goldenCases[1])}
}

func BenchmarkEncode(b *testing.B) {
	text, toks := benchInputs(b)
	for _, tok := range toks {
		b.Run(tok.Name(), func(b *testing.B) {
			ids := make([]uint32, 0, len(text))
			b.SetBytes(int64(len(text)))
			cpu := cpuSeconds()
			for b.Loop() {
				ids = tok.AppendEncode(ids[:0], text)
			}
			reportCPU(b, len(text), cpu)
			b.ReportMetric(float64(len(text))/float64(len(ids)), "bytes/token")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	text, toks := benchInputs(b)
	for _, tok := range toks {
		b.Run(tok.Name(), func(b *testing.B) {
			ids := tok.Encode(text)
			out := make([]byte, 0, len(text))
			b.SetBytes(int64(len(text)))
			cpu := cpuSeconds()
			for b.Loop() {
				out, _ = tok.AppendDecode(out[:0], ids, false)
			}
			reportCPU(b, len(text), cpu)
		})
	}
}

// reportCPU adds MB per CPU-second since start, the rate that does not count time the
// machine gave to other processes.
func reportCPU(b *testing.B, size int, start float64) {
	if secs := cpuSeconds() - start; secs > 0 {
		b.ReportMetric(float64(size)*float64(b.N)/1e6/secs, "MB/cpu-s")
	}
}

// BenchmarkTrain learns vocab 2048 from the sample (the 8192-on-builtin:gostd timing is a
// command in docs/tokenizer.md).
func BenchmarkTrain(b *testing.B) {
	text := readSample(b)
	for b.Loop() {
		if _, err := Train(b.Context(), TrainConfig{VocabSize: 2048}, [][]byte{text}); err != nil {
			b.Fatal(err)
		}
	}
}
