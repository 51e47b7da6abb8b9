# Sourced by distill_table1.sh and distill_replays.sh (not a wave): the repository root, the
# environment, the run store and pages folders, and the converged budget's run config $C — one
# definition, because a replay's client side must be exactly its source run's.
# The budget (docs/distill-results.md, "The budget curve"): 6 clients, n = 300 private texts each
# (dst-train-size=2000: 200 anchors), 6 rounds of E = 1 local epoch, LoRA on q/v of the top 2 layers
# over the frozen-layer cache, the same 500 test texts as the curve and the capacity table;
# dst-eval-every=3: CA / ASR at rounds 0, 3 and 6. C_EXTRA appends keys (later ones win).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

CORPUS=${CORPUS:-sentiment}
RUNS=${RUNS:-runs/distill-minilm-converged-$CORPUS}
OUT=${OUT:-docs/results/distill-minilm-converged-$CORPUS}
DEVICE=${DEVICE:-auto}
C="data-dir=${DATA_DIR:-../shared/data} num-clients=6 dst-train-size=2000 dst-test-size=500 dst-lora-layers=2 \
dst-rounds=6 dst-local-epochs=1 dst-eval-every=3 checkpoint-every=2 device=$DEVICE ${C_EXTRA:-}"
