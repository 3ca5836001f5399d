package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteJSON writes b as a Hugging Face tokenizer.json (the schema tokenizers ≥ 0.20
// reads; merges in the [a, b] form): GPT-2's layout (ByteLevel pre-tokenizer,
// post-processor and decoder) for GPT2Pattern, Llama-3's (Split with its regex, then
// ByteLevel without regex; ignore_merges) for Llama3Pattern.
func (b *BPE) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	str := func(s string) string {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	fmt.Fprint(bw, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range b.Special {
		if i > 0 {
			bw.WriteString(",")
		}
		fmt.Fprintf(bw, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}", len(b.Tokens)+i, str(s))
	}
	bw.WriteString("\n  ],\n  \"normalizer\": null,\n")
	llama := b.Pattern == Llama3Pattern
	if llama {
		fmt.Fprintf(bw, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n", str(Llama3Pattern))
	} else {
		bw.WriteString("  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n")
	}
	bw.WriteString("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n")
	bw.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n")
	fmt.Fprintf(bw, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %t,\n    \"vocab\": {", llama)
	names := make([]string, len(b.Tokens))
	for id, tok := range b.Tokens {
		names[id] = str(byteLevelEncode(tok))
		if id > 0 {
			bw.WriteString(",")
		}
		fmt.Fprintf(bw, "\n      %s: %d", names[id], id)
	}
	bw.WriteString("\n    },\n    \"merges\": [")
	for i, m := range b.Merges {
		if i > 0 {
			bw.WriteString(",")
		}
		fmt.Fprintf(bw, "\n      [%s, %s]", names[m[0]], names[m[1]])
	}
	bw.WriteString("\n    ]\n  }\n}\n")
	return bw.Flush()
}

// WriteFile writes b's tokenizer.json to path atomically (a temporary file renamed).
func (b *BPE) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokenizer-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := b.WriteJSON(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// Tokenizer is b loaded as a Tokenizer (through its tokenizer.json, so that what Train
// returns and what a file gives cannot differ).
func (b *BPE) Tokenizer() (*Tokenizer, error) {
	var buf bytes.Buffer
	if err := b.WriteJSON(&buf); err != nil {
		return nil, err
	}
	return Parse(buf.Bytes(), "trained")
}
