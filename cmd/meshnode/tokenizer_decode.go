package main

import (
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

type tokenizerDecodeOptions struct {
	tokenizer   string
	skipSpecial bool
	output      string
}

func newTokenizerDecodeCmd() *cobra.Command {
	o := &tokenizerDecodeOptions{}
	cmd := &cobra.Command{
		Use:   "decode --tokenizer FILE IDS...",
		Short: "Print the text of token ids",
		Long: `Print the text that IDS stand for under a tokenizer.json (the ByteLevel decoder). IDS are
numbers separated by spaces or commas, in one or more arguments, or - to read them from
standard input (a JSON array works too). The bytes are written as they are; -o json prints
{"text": "..."} (bytes that are not UTF-8 become U+FFFD there).`,
		Example: `  meshnode tokenizer decode --tokenizer tokenizer.json 1234 99 7`,
		Args:    cobra.MinimumNArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	cmd.Flags().StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json (required)")
	cmd.Flags().BoolVar(&o.skipSpecial, "skip-special", false, "leave special tokens out")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func (o *tokenizerDecodeOptions) run(cmd *cobra.Command, args []string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	tok, err := loadTokenizer(o.tokenizer)
	if err != nil {
		return err
	}
	src := strings.Join(args, " ")
	if len(args) == 1 && args[0] == "-" {
		b, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return err
		}
		src = string(b)
	}
	ids, err := parseIDs(src)
	if err != nil {
		return err
	}
	text, err := tok.AppendDecode(nil, ids, o.skipSpecial)
	if err != nil {
		return usagef("%v", err)
	}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), map[string]any{"text": string(text), "ids": len(ids)})
		return nil
	}
	_, err = cmd.OutOrStdout().Write(text)
	return err
}

// parseIDs reads ids separated by spaces, commas or newlines, with optional [ ] around them.
func parseIDs(s string) ([]uint32, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' || r == '[' || r == ']'
	})
	ids := make([]uint32, 0, len(fields))
	for _, f := range fields {
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, usagef("ids: %q is not a token id (a number from 0)", f)
		}
		ids = append(ids, uint32(v))
	}
	return ids, nil
}
