package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
)

type tokenizerEncodeOptions struct {
	tokenizer  string
	addSpecial bool
	output     string
}

func newTokenizerEncodeCmd() *cobra.Command {
	o := &tokenizerEncodeOptions{}
	cmd := &cobra.Command{
		Use:   "encode --tokenizer FILE TEXT|-",
		Short: "Print the token ids of a text",
		Long: `Print the ids of TEXT (or of standard input, with -) under a tokenizer.json: the ids of
Hugging Face tokenizers' encode(text, add_special_tokens=False), or with
--add-special-tokens the post-processor's template around them (Llama-3's
<|begin_of_text|>). Text output is the ids separated by spaces; -o json prints
{"ids": [...], "bytes": N}.`,
		Example: `  meshnode tokenizer encode --tokenizer tokenizer.json "func main() {}"
  meshnode tokenizer encode --tokenizer tokenizer.json -o json - < file.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	cmd.Flags().StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json (required)")
	cmd.Flags().BoolVar(&o.addSpecial, "add-special-tokens", false, "apply the post-processor's template (a BOS token, say)")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func (o *tokenizerEncodeOptions) run(cmd *cobra.Command, arg string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	tok, err := loadTokenizer(o.tokenizer)
	if err != nil {
		return err
	}
	text := []byte(arg)
	if arg == "-" {
		if text, err = io.ReadAll(cmd.InOrStdin()); err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
	}
	ids := tok.Encode(text)
	if o.addSpecial {
		ids = tok.EncodeAddingSpecial(text)
	}
	w := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<16)
	if o.output == "json" {
		fmt.Fprintf(w, `{"bytes":%d,"ids":[`, len(text))
	}
	var buf []byte
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ' ')
			if o.output == "json" {
				buf[len(buf)-1] = ','
			}
		}
		buf = strconv.AppendUint(buf, uint64(id), 10)
		if len(buf) > 1<<15 {
			w.Write(buf)
			buf = buf[:0]
		}
	}
	w.Write(buf)
	if o.output == "json" {
		w.WriteString("]}")
	}
	w.WriteString("\n")
	return w.Flush()
}
