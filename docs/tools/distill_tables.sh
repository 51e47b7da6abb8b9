#!/usr/bin/env bash
# RFD-LoRA's tables on all-MiniLM-L6-v2, in the order of their priority: what
# docs/distill.md shows, stage by stage. Every stage is resumable (finished runs are skipped, the
# replays only run where their source run is finished).
#
#   bash docs/tools/distill_tables.sh STAGE [STAGE ...]
#
# stages: t1-sentiment, t1-genre (Table 1), replays-sentiment, replays-genre (the ablation, the
# aggregator and M tables, fedcal's prior correction — server-side replays, no client trains),
# attacks (the logit-energy attack, anchor-set poisoning), sweeps (ranks, anchor-set sizes),
# report (every docs/results/distill-minilm-* folder from the run store).
#
# Environment: JOBS (runs at a time within one call, default 1), DATA_DIR (default ../shared/data;
# an execution key, so it changes no run id). A call whose runs fail is named on stderr and the
# stage goes on with its other calls (the script then exits 1): one failed cell does not cost the
# cells after it, and a re-run retries only what is unfinished.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# The budget setting (docs/distill.md, "The setting of the tables"): one for every table.
C="data-dir=${DATA_DIR:-../shared/data} num-clients=6 dst-train-size=1500 dst-test-size=300 dst-max-length=48 dst-lora-layers=1 batch-size=32 dst-rounds=3 dst-eval-every=3 dst-distill-steps=8"
R=runs/distill-minilm
SEEDS=0-2
FAILED=0

d() {  # d CORPUS OUTPUT [fedcal distill arguments...]
  local corpus=$1 out=$2; shift 2
  fedcal distill --jobs "${JOBS:-1}" --no-progress --report "/tmp/report-$(basename "$out")" --seeds "$SEEDS" \
      dst-corpus="$corpus" $C output-dir="$out" "$@" \
    || { FAILED=1; echo "distill_tables.sh: failed: $corpus $out $*" >&2; }
}

table1() {  # the acceptance cells first, then the other baselines, then skew, then the other rhos
  local T=$1 out=$R-$1
  d "$T" "$out" --methods rfd --rhos 0.3 --partitions iid
  d "$T" "$out" --methods fedit --rhos 0.3 --partitions iid dst-ranks=8
  d "$T" "$out" --methods flora,flexlora --rhos 0.3 --partitions iid
  d "$T" "$out" --methods ffa,lorafair --rhos 0.3 --partitions iid dst-ranks=8
  d "$T" "$out" --methods rfd,flora,flexlora --rhos 0.3 --partitions skew
  d "$T" "$out" --methods fedit,ffa,lorafair --rhos 0.3 --partitions skew dst-ranks=8
  d "$T" "$out" --methods rfd,flora,flexlora --rhos 0,0.1 --partitions iid,skew
  d "$T" "$out" --methods fedit,ffa,lorafair --rhos 0,0.1 --partitions iid,skew dst-ranks=8
}

replays() {  # server-side replays on Table 1's RFD-LoRA uploads (copied, so Table 1's folder stays Table 1)
  local T=$1 A=$R-$1-ablation
  mkdir -p "$A"
  for run in "$R-$T"/distill-"$T"-rfd-*; do
    [ -f "$run/DONE" ] && [ ! -e "$A/$(basename "$run")" ] && cp -r "$run" "$A/"
  done
  d "$T" "$A" --methods rfd --rhos 0.3 --partitions iid,skew --replay --ablation
  d "$T" "$A" --methods rfd --rhos 0.3 --partitions iid,skew --replay --aggregators mean,median,mom
  d "$T" "$A" --methods rfd --rhos 0.3 --partitions iid,skew --replay --groups 1,3,5,10
  # fedcal's variant: the label-prior correction, on every Table 1 RFD-LoRA run
  d "$T" "$A" --methods rfd --rhos 0,0.1,0.3 --partitions iid,skew --replay dst-prior-correct=true
  d "$T" "$A" --methods rfd --rhos 0,0.1,0.3 --partitions iid,skew --replay dst-prior-correct=true dst-prior-target=uniform
  # the student's budget: 4x the distillation steps per round on the same uploads
  d "$T" "$A" --methods rfd --rhos 0,0.3 --partitions iid,skew --replay dst-distill-steps=32
}

attacks() {  # sentiment, IID, rho = 0.3: the logit-energy attack and anchor-set poisoning (RFD-LoRA)
  local out=$R-sentiment-attacks
  d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid --replay --ablation dst-logit-attack=scale dst-attack-factor=10
  d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid --replay --ablation dst-logit-attack=flip dst-attack-factor=10
  d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid dst-anchor-attack=trigger dst-anchor-attack-frac=0.1
  d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid dst-anchor-attack=target dst-anchor-attack-frac=0.1
  # which rule stops the anchor poisoning: the poisoned runs' uploads replayed under the mean and the median
  for a in trigger target; do
    d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid --replay --aggregators mean,median,mom \
        dst-anchor-attack=$a dst-anchor-attack-frac=0.1
  done
}

sweeps() {  # sentiment, IID, rho = 0.3: one LoRA rank for every client, then the anchor-set size
  local out=$R-sentiment-sweeps
  for r in 2 4 8 16; do d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid dst-ranks=$r; done
  for f in 0.05 0.2; do d sentiment "$out" --methods rfd --rhos 0.3 --partitions iid dst-anchor-frac=$f; done
}

report() {
  for T in sentiment genre; do
    [ -d "$R-$T" ] && fedcal report "$R-$T"/* --out "docs/results/distill-minilm-$T" \
      && python -m fedcal.pages run_seconds --by machine,dst-method "$R-$T"/* > "docs/results/distill-minilm-$T/seconds.md"
    [ -d "$R-$T-ablation" ] && fedcal report "$R-$T-ablation"/* --out "docs/results/distill-minilm-$T-ablation"
  done
  [ -d "$R-sentiment-attacks" ] && fedcal report "$R-sentiment-attacks"/* --out docs/results/distill-minilm-sentiment-attacks
  [ -d "$R-sentiment-sweeps" ] && fedcal report "$R-sentiment-sweeps"/* "$R-sentiment"/distill-sentiment-rfd-iid-bd0.3-* \
      --out docs/results/distill-minilm-sentiment-sweeps
  true
}

for stage in "$@"; do
  case $stage in
    t1-sentiment) table1 sentiment ;;
    t1-genre) table1 genre ;;
    replays-sentiment) replays sentiment ;;
    replays-genre) replays genre ;;
    attacks) attacks ;;
    sweeps) sweeps ;;
    report) report ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
exit $FAILED
