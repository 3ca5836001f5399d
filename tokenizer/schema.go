package tokenizer

import "encoding/json"

// The parts of Hugging Face's tokenizer.json schema this package reads. Fields it does not
// implement are kept as raw JSON so that a non-null value can be refused by name.

type fileJSON struct {
	Version       string           `json:"version"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int64  `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

// componentJSON is any of the pre-tokenizer, post-processor and decoder objects.
type componentJSON struct {
	Type           string            `json:"type"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	Processors     []json.RawMessage `json:"processors"`
	Decoders       []json.RawMessage `json:"decoders"`
	// TemplateProcessing
	Single        []map[string]templateItemJSON  `json:"single"`
	SpecialTokens map[string]templateSpecialJSON `json:"special_tokens"`
}

// templateItemJSON is one item of a TemplateProcessing template: the value of a
// {"SpecialToken": …} or {"Sequence": …} object.
type templateItemJSON struct {
	ID     string `json:"id"`
	TypeID int    `json:"type_id"`
}

type templateSpecialJSON struct {
	ID  string  `json:"id"`
	IDs []int64 `json:"ids"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}
