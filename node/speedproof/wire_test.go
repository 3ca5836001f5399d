package speedproof

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestChallengeBounds(t *testing.T) {
	ok := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 10}
	for name, c := range map[string]Challenge{
		"rows 0":            {Rows: 0, Cols: 16, Links: 1},
		"rows 5000":         {Rows: 5000, Cols: 16, Links: 1},
		"cols 17":           {Rows: 64, Cols: 17, Links: 1},
		"cols 2048":         {Rows: 64, Cols: 2048, Links: 1},
		"links 0":           {Rows: 64, Cols: 16, Links: 0},
		"over MaxFLOPs":     {Rows: MaxRows, Cols: MaxCols, Links: MaxLinks},
		"just over MaxFLOP": {Rows: DefaultRows, Cols: DefaultCols, Links: int(MaxFLOPs/ok.FLOPs()*10) + 1},
	} {
		if c.Validate() == nil {
			t.Errorf("%s: %+v accepted", name, c)
		}
		if _, err := c.MarshalBinary(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: encoded (%v)", name, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if big := Size(1e6, 300e6); big.Validate() != nil || big.FLOPs() > MaxFLOPs || big.Links < 2 {
		t.Fatalf("a 1e6 GFLOP/s claim sized %+v (%.3g FLOP)", big, big.FLOPs())
	}
	if small := Size(1e-3, 300e6); small.Links != 1 {
		t.Fatalf("a tiny claim sized %+v", small)
	}
}

func TestWireRoundTrip(t *testing.T) {
	c := Size(50, 300e6)
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadChallenge(bytes.NewReader(b))
	if err != nil || got != c {
		t.Fatalf("challenge round trip: %+v, %v", got, err)
	}
	a := Answer{Path: "avx512", Hashes: bytes.Repeat([]byte{7}, c.Rows*RowHashSize)}
	ab, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadAnswer(bytes.NewReader(ab), c)
	if err != nil || back.Path != a.Path || !bytes.Equal(back.Hashes, a.Hashes) {
		t.Fatalf("answer round trip: %q, %v", back.Path, err)
	}
	if _, err := ReadAnswer(bytes.NewReader(ab), Challenge{Rows: c.Rows + 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an answer with another row count was read: %v", err)
	}
}

// FuzzChallenge: any bytes decode to a valid challenge or to ErrMalformed, and a decoded
// challenge encodes back to the same bytes.
func FuzzChallenge(f *testing.F) {
	for _, c := range []Challenge{Size(50, 300e6), Size(1e6, 300e6), {Rows: MinRows, Cols: MinCols, Links: 1}} {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Challenge
		if err := c.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if c.FLOPs() > MaxFLOPs {
			t.Fatalf("decoded a %.3g FLOP challenge", c.FLOPs())
		}
		back, err := c.MarshalBinary()
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("re-encoded %x as %x (%v)", b, back, err)
		}
	})
}

// FuzzAnswer: an answer is read only with the challenge's row count and a bounded path,
// and never allocates more than that.
func FuzzAnswer(f *testing.F) {
	c := Challenge{Rows: MinRows, Cols: MinCols, Links: 1}
	good, _ := Answer{Path: "avx2", Hashes: make([]byte, c.Rows*RowHashSize)}.MarshalBinary()
	f.Add(good)
	f.Add(good[:10])
	f.Add([]byte{wireVersion, 255, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadAnswer(bytes.NewReader(b), c)
		if err != nil {
			return
		}
		if len(a.Path) > MaxPathLen || len(a.Hashes) != c.Rows*RowHashSize {
			t.Fatalf("read a %d-byte path and %d bytes of hashes", len(a.Path), len(a.Hashes))
		}
	})
}

func TestTimeoutBounds(t *testing.T) {
	c := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 1}
	for _, tc := range []struct {
		claim float64
		want  time.Duration
	}{{0, MinTimeout}, {-1, MinTimeout}, {1e6, MinTimeout}, {1e-6, MaxTimeout}, {c.FLOPs() * 4 / 10 / 1e9, 10 * time.Second}} {
		if got := Timeout(c, tc.claim); got.Round(time.Millisecond) != tc.want {
			t.Errorf("Timeout at %g GFLOP/s = %v, want %v", tc.claim, got, tc.want)
		}
	}
}
