package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// train → encode → decode through the CLI gives the text back; -o json is one object.
func TestTokenizerTrainEncodeDecode(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join("..", "..", "tokenizer", "testdata") // a directory: its files are read
	out := filepath.Join(dir, "tokenizer.json")
	stdout, stderr, code := runMeshCLI(t, "tokenizer", "train", "--vocab", "300", "--out", out, "-o", "json", corpus)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	var res struct{ Vocab, Merges int }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Vocab != 300 || res.Merges < 300-257 {
		t.Fatalf("train -o json = %q (%v)", stdout, err)
	}
	in := "fmt.Println(\"héllo 🙂\")<|endoftext|>"
	stdout, stderr, code = runMeshCLI(t, "tokenizer", "encode", "--tokenizer", out, "-o", "json", in)
	if code != 0 {
		t.Fatalf("encode: exit %d: %s", code, stderr)
	}
	var enc struct {
		IDs   []uint32
		Bytes int
	}
	if err := json.Unmarshal([]byte(stdout), &enc); err != nil || enc.Bytes != len(in) || len(enc.IDs) == 0 || enc.IDs[len(enc.IDs)-1] != 299 {
		t.Fatalf("encode -o json = %q (%v)", stdout, err)
	}
	args := []string{"tokenizer", "decode", "--tokenizer", out}
	for _, id := range enc.IDs {
		args = append(args, strconv.Itoa(int(id)))
	}
	stdout, stderr, code = runMeshCLI(t, args...)
	if code != 0 || stdout != in {
		t.Fatalf("decode: exit %d, %q, %s", code, stdout, stderr)
	}
	text2, _, _ := runMeshCLI(t, "tokenizer", "encode", "--tokenizer", out, in)
	if fields := strings.Fields(text2); len(fields) != len(enc.IDs) {
		t.Errorf("text output %q", text2)
	}
}

// Bad input exits 2 with one line that names the file and what is wrong.
func TestTokenizerBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`), 0o644)
	notJSON := filepath.Join(dir, "notjson.json")
	os.WriteFile(notJSON, []byte(`{"model": `), 0o644)
	good := filepath.Join("..", "..", "tokenizer", "testdata", "gpt2-style-2048.json")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"tokenizer", "encode", "--tokenizer", bad, "x"}, bad + ": model.type"},
		{[]string{"tokenizer", "encode", "--tokenizer", notJSON, "x"}, notJSON + ": not a tokenizer.json"},
		{[]string{"tokenizer", "encode", "--tokenizer", filepath.Join(dir, "missing.json"), "x"}, "missing.json"},
		{[]string{"tokenizer", "encode", "x"}, "--tokenizer is required"},
		{[]string{"tokenizer", "decode", "--tokenizer", good, "1", "999999"}, "id 999999"},
		{[]string{"tokenizer", "decode", "--tokenizer", good, "1", "x"}, `"x" is not a token id`},
		{[]string{"tokenizer", "train", "--vocab", "10", "--out", filepath.Join(dir, "t.json"), good}, "vocab must be between"},
		{[]string{"tokenizer", "train", "--out", filepath.Join(dir, "t.json"), filepath.Join(dir, "nothing")}, "nothing"},
		{[]string{"tokenizer", "train", "--pattern", "bert", good}, "--pattern"},
	}
	for _, c := range cases {
		stdout, stderr, code := runMeshCLI(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args[1:], code, stdout, stderr, c.want)
		}
	}
}
