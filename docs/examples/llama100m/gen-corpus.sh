#!/bin/sh
# gen-corpus.sh DIR [FILES] — write FILES (default 80) text files of 64 MiB each into DIR
# (80 × 64 MiB = 5 GiB): each is the Go distribution's .go sources concatenated in an order
# shuffled by the file's number (deterministic), cut at 64 MiB. Used for the streaming
# measurement in docs/PERFORMANCE.md, "A ~100M Llama on the testnet".
set -eu
dir=${1:?usage: gen-corpus.sh DIR [FILES]}
files=${2:-80}
src=$(go env GOROOT)/src
list=$(mktemp)
seed=$(mktemp)
trap 'rm -f "$list" "$seed"' EXIT
find "$src" -name '*.go' -type f | LC_ALL=C sort >"$list"
mkdir -p "$dir"
i=0
while [ "$i" -lt "$files" ]; do
	name=$(printf '%s/doc%03d.txt' "$dir" "$i")
	# head closes the pipe at 64 MiB; xargs/cat then die of SIGPIPE, which is expected.
	yes "$i" | head -c 1048576 >"$seed"
	shuf --random-source="$seed" "$list" | tr '\n' '\0' | xargs -0 cat 2>/dev/null | head -c 67108864 >"$name" || true
	i=$((i + 1))
done
du -sh "$dir"
