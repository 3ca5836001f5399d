// Package tokenizer is meshnode's byte-level BPE tokenizer: it reads Hugging Face
// tokenizer.json files of the GPT-2 and Llama-3 kind (a BPE model over GPT-2's byte-to-
// Unicode alphabet, the ByteLevel pre-tokenizer or a Split with Llama-3's regex before it,
// added and special tokens, byte fallback, the ByteLevel decoder), encodes and decodes text
// with the ids Hugging Face's tokenizers give, and learns new ones from a corpus (Train)
// and writes them in the same schema (WriteJSON).
//
// Encoding is exact: the pre-tokenizer patterns are implemented by hand-written scanners
// with Oniguruma's semantics (the regex engine of Hugging Face's Rust tokenizers), not
// approximated. A tokenizer.json that asks for anything this package does not implement (a
// WordPiece or Unigram model, a normalizer, another regex, truncation) is refused at load
// time with an error naming the file and the field; the package never guesses ids.
//
// The package does no I/O of its own beyond Load, WriteFile and ReadCorpus, opens no socket,
// and imports nothing of meshnode's: training (model.TextEncoder) and generate use it, not
// the other way round.
package tokenizer
