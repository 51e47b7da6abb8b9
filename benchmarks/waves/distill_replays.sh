#!/usr/bin/env bash
# RFD-LoRA's server-side tables at the converged budget, replayed on the uploads that Table 1's
# RFD-LoRA runs recorded (fedcal.distill.replay: no client trains again, only the server's
# distillation and the evaluations run): the module ablation (every CAT / MMD-KD / DIS setting),
# the aggregator (mean / median / MoM at M = 5) and M (1, 3, 5, 10 groups under MoM) on IID, rho =
# 0.3; fedcal's label-prior correction (towards the clients' median prior, and towards the
# uniform one) on the label-skew cell (and the uniform one on the IID cell, where it should cost nothing); then the module ablation where the paper's Table 3 has it
# (its Full row is Table 1's rho = 0.1 cell: IID and severe non-IID, i.e. label skew). 3 seeds each;
# every replay is a run directory of its own config in the same store as the runs it replays (the
# label-skew replays: the skew half's store, at its rounds; distill_budget.sh).
#
#   bash benchmarks/waves/distill_table1.sh     # first: the runs whose uploads are replayed here
#   bash benchmarks/waves/distill_replays.sh    # then this (RUNS, OUT, SKEW_ROUNDS, DATA_DIR, DEVICE as there)
#
# A call whose source runs have not finished yet says so (one line per cell) and the wave goes on;
# the same command later replays what is missing, finished replays are skipped.
# Cost, measured on the development machine's 2 CPU cores (one torch thread, beside one Table 1
# run): about 1 minute of wall time per 6-round replay with the padding skip (2 before it), so the
# four IID calls (60 replays) take about an hour there; a 12-round skew replay about twice as long.
source "$(dirname "$0")/distill_budget.sh"  # the same budget as Table 1: a replay's client side is its source's

r() { distill_call "$1" "$2" "$3" --replay --methods rfd "${@:4}"; }  # r STORE "CONFIG" REPORT [arguments...]

if [ "${REPORT_ONLY:-0}" != 1 ]; then
  r "$RUNS" "$C" "$OUT/ablation" --rhos 0.3 --partitions iid --ablation
  r "$RUNS" "$C" "$OUT/aggregators" --rhos 0.3 --partitions iid --aggregators mean,median,mom
  r "$RUNS" "$C" "$OUT/groups" --rhos 0.3 --partitions iid --aggregators mom --groups 1,3,5,10
  r "$RUNS" "$C" "$OUT/ablation-rho0.1" --rhos 0.1 --partitions iid --ablation
  # the uniform-prior correction where it should change nothing: IID clients (what it costs there)
  r "$RUNS" "$C" "$OUT/prior-uniform-iid" --rhos 0.3 --partitions iid dst-prior-correct=true \
      dst-prior-target=uniform
  # the label-skew half, at its own rounds and in its own store (distill_budget.sh)
  r "$RUNS_SKEW" "$C_SKEW" "$OUT_SKEW/prior" --rhos 0.3 --partitions skew dst-prior-correct=true
  r "$RUNS_SKEW" "$C_SKEW" "$OUT_SKEW/prior-uniform" --rhos 0.3 --partitions skew dst-prior-correct=true \
      dst-prior-target=uniform
  r "$RUNS_SKEW" "$C_SKEW" "$OUT_SKEW/ablation-rho0.1-skew" --rhos 0.1 --partitions skew --ablation
fi
exit $FAILED
