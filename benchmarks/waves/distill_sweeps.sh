#!/usr/bin/env bash
# RFD-LoRA's attack and sweep tables at the converged budget, on the client side of Table 1's
# RFD-LoRA cell (sentiment, IID, rho = 0.3, seeds 0-2, the same store):
#
#   anchors  anchor-set poisoning on 10 %, then on 20 % (the paper's appendix: "20% of anchor samples
#            replaced with triggered examples labeled as y_target") of the public anchors (fedcal/distill/anchor_attack.py:
#            `trigger` - the pool carries the trigger on non-target anchors and the backdoor clients
#            upload the target there; `target` - each backdoor client uploads the target on the
#            anchors its model is surest are not the target): client runs (the attack changes the
#            uploads), then their uploads replayed under the mean and the median beside MoM
#   ranks    one LoRA rank for every client, r in {2, 4, 8, 16}, against Table 1's heterogeneous
#            ranks (2, 4, 8, 16, 2, 4 over the six clients): the paper's Fig. 1 (a)
#   shares   the share of the training texts that become public anchors, 5 % and 20 % against
#            Table 1's 10 % (the rest is split among the clients): the paper's Fig. 1 (b)
#   logit    the logit-energy attack (the backdoor clients scale their anchor logits by 10, or by
#            -10, before the server clips them), replayed on Table 1's uploads under every module
#            setting (not in the default stages: the issue's tables do not ask for it)
#
#   bash benchmarks/waves/distill_sweeps.sh                  # anchors ranks shares (RUNS, OUT, DATA_DIR, DEVICE as distill_table1.sh)
#   bash benchmarks/waves/distill_sweeps.sh logit            # one stage
#   REPORT_ONLY=1 bash benchmarks/waves/distill_sweeps.sh    # the pages of what has finished
#
# Pages: $OUT/attacks (Table 1's unattacked cell, its mean / median replays and every anchor-attack
# run and replay), $OUT/sweeps (Table 1's cell, every single-rank and anchor-share run),
# $OUT/logit-attack; each a `fedcal report` of the run directories picked by their config.json from
# Table 1's store and this wave's ($RUNS_SWEEPS).
# Resumable through the store like Table 1 (finished runs skipped, a replay waits for its source).
# Cost, estimated from Table 1's RFD-LoRA runs on the development machine's 2 cores (about 200 s of
# one core each, replays about 1 minute): anchors 12 runs + 24 replays, ranks 12 runs, shares 6 runs
# - about 2 h 20 min of one core, 70 minutes with two calls side by side; logit 48 replays, about
# 50 minutes more.
# Measured for the anchors stage at 20 %: the trigger attack's 3 client runs and 9 replays in 16 minutes,
# one at a time beside the test suite (02:48-03:04 of one session, run.log timestamps).
source "$(dirname "$0")/distill_budget.sh"  # Table 1's budget, store and pages folder
# the client runs of this wave (and their replays) in a store of their own: Table 1's pages take every
# run of Table 1's store as a Table 1 run; the logit stage replays Table 1's uploads, so it stays there
RUNS_SWEEPS=${RUNS_SWEEPS:-$RUNS-sweeps}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(anchors ranks shares)

d() {  # d STORE [fedcal distill arguments...]: RFD-LoRA, IID, rho = 0.3, at Table 1's budget
  distill_call "$1" "$C" "/tmp/report-sweeps-$(basename "$1")" --methods rfd --rhos 0.3 --partitions iid "${@:2}"
}

pick() {  # pick key=value ...: the finished run directories of both stores whose config has every value
  # (fedcal's own reading: finished = DONE for this config's hash; a key added since a run was made
  # reads as its default)
  python - "$RUNS" "$RUNS_SWEEPS" "$@" <<'EOF'
import sys
from pathlib import Path
from fedcal.results import is_finished, load_config
stores, want = sys.argv[1:3], dict(a.split("=", 1) for a in sys.argv[3:])
for d in sorted(p for store in stores for p in Path(store).glob("distill-*")):
    if is_finished(d):
        cfg = load_config(d).to_flower()
        if all(str(cfg[k]).lower() == v.lower() for k, v in want.items()):
            print(d)
EOF
}

page() {  # page FOLDER key=value ...: a fedcal report of the picked runs (none: nothing written)
  local out=$1; shift
  mapfile -t dirs < <(pick "$@")
  [ ${#dirs[@]} -eq 0 ] && { echo "distill_sweeps.sh: no finished run for $out yet" >&2; return 0; }
  fedcal report "${dirs[@]}" --out "$out" || FAILED=1
}

for stage in "${STAGES[@]}"; do
  case $stage in anchors|ranks|shares|logit) ;; *) echo "distill_sweeps.sh: unknown stage $stage" >&2; exit 2 ;; esac
  [ "${REPORT_ONLY:-0}" = 1 ] && continue
  case $stage in
    anchors)
      for frac in 0.1 0.2; do
        for a in target trigger; do
          d "$RUNS_SWEEPS" dst-anchor-attack=$a dst-anchor-attack-frac=$frac
          d "$RUNS_SWEEPS" --replay --aggregators mean,median,mom dst-anchor-attack=$a dst-anchor-attack-frac=$frac
        done
      done ;;
    ranks) for r in 2 4 8 16; do d "$RUNS_SWEEPS" dst-ranks=$r; done ;;
    shares) for f in 0.05 0.2; do d "$RUNS_SWEEPS" dst-anchor-frac=$f; done ;;
    logit) for a in scale flip; do d "$RUNS" --replay --ablation dst-logit-attack=$a dst-attack-factor=10; done ;;
  esac
done

# the pages: RFD-LoRA, IID, rho = 0.3 of this store, every module on, no prior correction, M = 5
FULL=(dst-method=rfd dst-partition=iid dst-backdoor-ratio=0.3 dst-corpus="$CORPUS" dst-cat=true dst-mmd=true
      dst-dis=true dst-groups=5 dst-prior-correct=false)
page "$OUT/attacks" "${FULL[@]}" dst-logit-attack=none dst-ranks=2,4,8,16 dst-anchor-frac=0.1
page "$OUT/sweeps" "${FULL[@]}" dst-logit-attack=none dst-anchor-attack=none dst-aggregator=mom
[[ " ${STAGES[*]} " == *" logit "* ]] && page "$OUT/logit-attack" dst-method=rfd dst-partition=iid \
    dst-backdoor-ratio=0.3 dst-corpus="$CORPUS" dst-aggregator=mom dst-groups=5 dst-prior-correct=false \
    dst-anchor-attack=none dst-ranks=2,4,8,16 dst-anchor-frac=0.1
exit $FAILED
