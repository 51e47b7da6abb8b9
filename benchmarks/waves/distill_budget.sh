# Sourced by distill_table1.sh, distill_replays.sh and distill_sweeps.sh (not a wave): the repository
# root, the environment, the run store and pages folders, the converged budget's run config $C and the
# one `fedcal distill` call every wave makes — one definition, because a replay's client side must be
# exactly its source run's.
# The budget (docs/distill-results.md, "The budget curve"): 6 clients, n = 300 private texts each
# (dst-train-size=2000: 200 anchors), $ROUNDS rounds (below) of E = 1 local epoch, LoRA on q/v of the top 2 layers
# over the frozen-layer cache, the same 500 test texts as the curve and the capacity table;
# dst-eval-every=3: CA / ASR every 3 rounds. C_EXTRA appends keys (later ones win; the skew half's
# rounds below win over them).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

CORPUS=${CORPUS:-sentiment}
RUNS=${RUNS:-runs/distill-minilm-converged-$CORPUS}
OUT=${OUT:-docs/results/distill-minilm-converged-$CORPUS}
DEVICE=${DEVICE:-auto}
# The IID half's rounds, by the same rule per corpus (FedIT at rho = 0 within 3 points of the corpus's
# centralised capacity on seed 0's test texts): 6 on sentiment (the budget curve); 12 on tweets, whose
# FedIT is 5.8 points under its capacity at round 6 and 2.4 under at round 12 (docs/distill-results.md,
# "How many rounds the tweets need") — so the tweets' two halves share one budget.
case $CORPUS in tweets) ROUNDS=${ROUNDS:-12};; *) ROUNDS=${ROUNDS:-6};; esac
C="data-dir=${DATA_DIR:-../shared/data} num-clients=6 dst-train-size=2000 dst-test-size=500 dst-lora-layers=2 \
dst-rounds=$ROUNDS dst-local-epochs=1 dst-eval-every=3 checkpoint-every=2 device=$DEVICE ${C_EXTRA:-}"
# Label skew needs twice the rounds (docs/distill-results.md, "How many rounds label skew needs": FedIT
# at rho = 0 is at chance in 2 of 3 seeds at 6 rounds, in none at 12): the label-skew half of Table 1
# and its replays run at dst-rounds=$SKEW_ROUNDS into a store and pages folder of their own, so no
# table mixes the two budgets.
SKEW_ROUNDS=${SKEW_ROUNDS:-12}
RUNS_SKEW=${RUNS_SKEW:-$RUNS-skew$SKEW_ROUNDS}
OUT_SKEW=${OUT_SKEW:-$OUT-skew$SKEW_ROUNDS}
C_SKEW="$C dst-rounds=$SKEW_ROUNDS"

FAILED=0
# distill_call STORE "CONFIG" REPORT [fedcal distill arguments...]: seeds 0-2 of $CORPUS at CONFIG's
# budget into the run store STORE, JOBS runs at a time (default 1), its tables into REPORT; a failed
# call is named on stderr and the wave goes on with the next (and exits 1 at the end: $FAILED)
distill_call() {
  local store=$1 config=$2 report=$3; shift 3
  fedcal distill --jobs "${JOBS:-1}" --no-progress --report "$report" --seeds 0-2 \
      dst-corpus="$CORPUS" $config output-dir="$store" "$@" \
    || { FAILED=1; echo "$(basename "$0"): failed: $*" >&2; }
}
