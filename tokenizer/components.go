package tokenizer

import (
	"encoding/json"
	"fmt"
)

// The pipeline components of a tokenizer.json: pre-tokenizer, post-processor, decoder.

// preTokenizer reads ByteLevel, Split (GPT-2 or Llama-3 regex, Isolated) and Sequence.
func (p *parser) preTokenizer(t *Tokenizer, raw json.RawMessage) error {
	if isNull(raw) {
		return p.unsupported("pre_tokenizer", "null (a byte-level BPE needs the ByteLevel pre-tokenizer)")
	}
	var list []componentJSON
	var fields []string
	if err := p.flatten("pre_tokenizer", raw, &list, &fields); err != nil {
		return err
	}
	sawByteLevel := false
	for i, c := range list {
		field := fields[i]
		if sawByteLevel {
			return p.unsupported(field, "%s after ByteLevel (ByteLevel must come last)", c.Type)
		}
		switch c.Type {
		case "ByteLevel":
			sawByteLevel = true
			if c.AddPrefixSpace {
				if i != 0 {
					return p.unsupported(field+".add_prefix_space", "true after another pre-tokenizer")
				}
				t.prefixSpace = true
			}
			if c.UseRegex == nil || *c.UseRegex {
				t.stages = append(t.stages, gpt2Split)
			}
		case "Split":
			s, err := p.split(field, c)
			if err != nil {
				return err
			}
			t.stages = append(t.stages, s)
		default:
			return p.unsupported(field+".type", "%q (ByteLevel, Split and Sequence are implemented)", c.Type)
		}
	}
	if !sawByteLevel {
		return p.unsupported("pre_tokenizer", "no ByteLevel pre-tokenizer (only byte-level BPE is implemented)")
	}
	return nil
}

func (p *parser) split(field string, c componentJSON) (splitter, error) {
	switch {
	case c.Pattern == nil || c.Pattern.Regex == nil:
		return nil, p.unsupported(field+".pattern", "only a Regex pattern is implemented")
	case c.Behavior != "Isolated":
		return nil, p.unsupported(field+".behavior", "%q (Isolated is implemented)", c.Behavior)
	case c.Invert:
		return nil, p.unsupported(field+".invert", "true")
	}
	switch *c.Pattern.Regex {
	case GPT2Pattern:
		return gpt2Split, nil
	case Llama3Pattern:
		return llama3Split(3), nil
	case qwen2Pattern:
		return llama3Split(1), nil
	}
	return nil, p.unsupported(field+".pattern.Regex", "%q (GPT-2's and Llama-3's patterns are implemented)", *c.Pattern.Regex)
}

// flatten expands nested Sequences into a list of components with their JSON paths.
func (p *parser) flatten(field string, raw json.RawMessage, out *[]componentJSON, fields *[]string) error {
	if len(*out) > 64 {
		return p.errf(field, "more than 64 components")
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return p.errf(field, "%v", err)
	}
	if c.Type != "Sequence" {
		*out, *fields = append(*out, c), append(*fields, field)
		return nil
	}
	kids, name := c.PreTokenizers, "pretokenizers"
	if c.Processors != nil {
		kids, name = c.Processors, "processors"
	} else if c.Decoders != nil {
		kids, name = c.Decoders, "decoders"
	}
	for i, k := range kids {
		if err := p.flatten(fmt.Sprintf("%s.%s[%d]", field, name, i), k, out, fields); err != nil {
			return err
		}
	}
	return nil
}

// postProcessor reads the processors: ByteLevel (which changes no id) and one
// TemplateProcessing, whose single-sequence template EncodeAddingSpecial applies.
func (p *parser) postProcessor(t *Tokenizer, field string, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var list []componentJSON
	var fields []string
	if err := p.flatten(field, raw, &list, &fields); err != nil {
		return err
	}
	for i, c := range list {
		switch c.Type {
		case "ByteLevel":
		case "TemplateProcessing":
			if t.template != nil {
				return p.unsupported(fields[i], "a second TemplateProcessing")
			}
			tmpl, err := p.template(t, fields[i], c)
			if err != nil {
				return err
			}
			t.template = tmpl
		default:
			return p.unsupported(fields[i]+".type", "%q (ByteLevel and TemplateProcessing are read)", c.Type)
		}
	}
	return nil
}

// template reads a TemplateProcessing's single template into its pieces: runs of special
// ids and the place of the sequence.
func (p *parser) template(t *Tokenizer, field string, c componentJSON) ([]templatePiece, error) {
	var out []templatePiece
	seq := false
	for i, item := range c.Single {
		f := fmt.Sprintf("%s.single[%d]", field, i)
		if st, ok := item["SpecialToken"]; ok && len(item) == 1 {
			sp, ok := c.SpecialTokens[st.ID]
			if !ok {
				return nil, p.errf(f, "special token %q is not in special_tokens", st.ID)
			}
			var ids []uint32
			for _, id := range sp.IDs {
				if id < 0 || id >= int64(len(t.strs)) || !t.present[id] {
					return nil, p.errf(field+".special_tokens", "%q has id %d, not in the vocabulary", st.ID, id)
				}
				ids = append(ids, uint32(id))
			}
			out = append(out, templatePiece{ids: ids})
			continue
		}
		if sq, ok := item["Sequence"]; ok && len(item) == 1 && sq.ID == "A" && !seq {
			seq = true
			out = append(out, templatePiece{sequence: true})
			continue
		}
		return nil, p.unsupported(f, "only SpecialToken items and one Sequence A are read")
	}
	if !seq {
		return nil, p.errf(field+".single", "has no Sequence A")
	}
	return out, nil
}

func (p *parser) decoder(field string, raw json.RawMessage) error {
	if isNull(raw) {
		return p.unsupported(field, "null (the ByteLevel decoder is implemented)")
	}
	var list []componentJSON
	var fields []string
	if err := p.flatten(field, raw, &list, &fields); err != nil {
		return err
	}
	if len(list) != 1 || list[0].Type != "ByteLevel" {
		return p.unsupported(field, "only the ByteLevel decoder alone is implemented")
	}
	return nil
}
