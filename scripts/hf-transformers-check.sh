#!/usr/bin/env bash
# Checks meshnode's Hugging Face export against Hugging Face transformers itself: for each
# family, AutoModelForCausalLM.from_pretrained on `meshnode export`'s directory computes
# meshnode's logits (within 1e-4; on the GPU when there is one, TF32 off), and AutoTokenizer
# reads the exported tokenizer files to meshnode's ids (docs/models.md, "Hugging Face
# interop"). CI has no transformers; run this where it is installed, alone or from
# scripts/gpu-check.sh:
#
#   MESHNODE_TRANSFORMERS_PYTHON=/path/to/python scripts/hf-transformers-check.sh
#
# It fails, rather than skips, when that Python cannot import transformers and torch.
set -euo pipefail
cd "$(dirname "$0")/.."
export MESHNODE_TRANSFORMERS_PYTHON="${MESHNODE_TRANSFORMERS_PYTHON:-python3}"
export MESHNODE_REQUIRE_TRANSFORMERS=1
echo "hf-transformers-check: $("$MESHNODE_TRANSFORMERS_PYTHON" -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
exec go test ./cmd/meshnode -run 'TestHFExportLoadsInTransformers' -count=1 -v
