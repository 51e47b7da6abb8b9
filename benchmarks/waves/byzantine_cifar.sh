#!/usr/bin/env bash
# The CIFAR-10 cells of the Byzantine table that matter most, as a resumable wave for a lent GPU:
# FedAvg, the best two rules and NNM + trimmed mean, each benign and under the worst two attacks,
# at 20 % attackers, Dirichlet alpha = 0.5, seeds 0-2 — CIFAR10-CNN at the paper's CIFAR scale
# (50 clients, 10 a round, 100 rounds of 2 local epochs at lr 0.05 with crop-flip), so the rules'
# f = ceil(0.2 * 10) = 2.
#
#   bash benchmarks/waves/byzantine_cifar.sh                 # on the GPU machine, from the repo root
#   RULES="fedavg,median,geometric_median,nnm+trimmed_mean" ATTACKS="alie,minmax" bash benchmarks/waves/byzantine_cifar.sh
#
# RULES / ATTACKS: the defaults are provisional picks (the rules and attacks whose worst case the
# literature reports as best / worst); set them from the MNIST cross-silo table's worst-case rows
# once it exists. 4 rules x (benign + 2 attacks) x 3 seeds = 36 runs.
#
# Resumable: every run is a fedcal run directory under $OUT/runs (checkpoint every 5 rounds);
# run the same command again after an interruption and finished runs are skipped, interrupted
# ones resume from their last checkpoint; `--table-only` (TABLE_ONLY=1) writes the table of what
# has finished without starting anything.
#
# Cost, measured (docs/defense.md, "The CIFAR-10 cells, a GPU wave"; docs/results/byzantine-cifar10/cost.md):
# one cell (nnm+trimmed_mean under alie, seed 0, num-rounds=2, device=cpu, one torch thread) took
# 52 CPU-seconds in all on the development machine, about 21 CPU-seconds per training round
# (10 clients x 2 local epochs of about 1000 images each), so a 100-round run is about 35
# CPU-minutes and the wave's 36 runs about 21 CPU-hours: about 10.5 hours on the development
# machine's 2 cores with JOBS=2 and nothing else running. On one H200 (16 cores) the paper-scale
# CIFAR train runs at 5 clients a round took 63 runs in 12 minutes and 24 at once in 6 minutes
# (docs/defense-results.md); at 10 clients a round, expected about 15-25 minutes for the 36 runs
# at JOBS=16 — more than one lent session's 15 device-minutes: the wave resumes across sessions.
set -euo pipefail
cd "$(dirname "$0")/../.."
RULES=${RULES:-fedavg,trimmed_mean,geometric_median,nnm+trimmed_mean}
ATTACKS=${ATTACKS:-alie,minmax}
OUT=${OUT:-docs/results/byzantine-cifar10}
JOBS=${JOBS:-16}
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-../shared/data}
extra=()
[ "${TABLE_ONLY:-0}" = 1 ] && extra+=(--table-only)
exec fedcal byzantine --strategies "$RULES" --attacks "$ATTACKS" --ratios 0.2 --seeds 0-2 --jobs "$JOBS" \
    --report "$OUT" --title "CIFAR10-CNN, 20 % attackers, alpha 0.5, 10 of 50 clients a round" "${extra[@]}" \
    engine=inprocess device="$DEVICE" dataset=cifar10 model=cnn lr=0.05 local-epochs=2 augment=crop-flip \
    dirichlet-alpha=0.5 clients-per-round=10 eval-every=10 checkpoint-every=5 data-dir="$DATA" \
    output-dir="${RUNS:-runs/byzantine-cifar10}"
