#!/usr/bin/env bash
# The robust-inference clients at the authors' recipe, as a resumable wave for a lent GPU: for each seed,
# `fedcal inference-collect` trains the 17 CIFAR-10 clients of Dirichlet(0.5) shards (their ResNet-8,
# model=resnet8-wide; 20 local epochs of SGD lr 0.01, no momentum, weight decay 1e-4, batch 32,
# crop-and-flip, per-epoch cosine to 0.001) and stores each client's probits on the server's 10 % split
# and the 10,000 test images as float16 (fedcal-probits/*.npz, one file per seed). Everything after
# the clients then runs on a CPU from those files (docs/inference.md, "Stored probits"):
#
#   bash benchmarks/waves/inference_clients.sh                  # on the GPU machine, from the repo root
#   SEEDS="0 1" bash benchmarks/waves/inference_clients.sh      # fewer seeds; ALPHA=0.3 N=10 likewise
#
# Resumable: the file is rewritten after every client; run the same command again after an
# interruption (or in the next lent session) and each seed resumes at its first client not stored.
# Each seed's last line is the clean accuracy of its clients and of the plain mean of their probits.
#
# Cost. Measured on the development CPU (benchmarks/inference_client_cost.py --steps 100, one niced
# thread shared with other work; docs/results/benchmarks/inference_client_cost.txt): a step (batch 32,
# forward + backward) is 148.6 GFLOP and took 4.2 s (36 GFLOP/s); one seed is 28,280 steps (1,414 steps
# an epoch over the 17 clients x 20 epochs) plus 17 x 15,000 probits: about 2,100 CPU-minutes
# (35 CPU-hours) per seed, 174 CPU-hours for five.
# On one H200, an estimate, not a measurement: one seed is 28,280 x 148.6 GFLOP = 4.2 PFLOP of training
# (the probits add 0.4 PFLOP); at an effective 20-40 TFLOP/s for batch-32 convolutions (TF32, far below
# the chip's peak) that is 2-4 minutes of arithmetic per seed plus about 2 minutes of per-step overhead
# (~4 ms x 28,280 steps), so the five seeds, run at once, about 10-20 minutes: more than one lent
# session's 15 device-minutes, hence per-client resumption.
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-0 1 2 3 4}
ALPHA=${ALPHA:-0.5}
N=${N:-17}
OUT=${OUT:-fedcal-probits}
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-../shared/data}
mkdir -p "$OUT"
keys=(dataset=cifar10 model=resnet8-wide "num-clients=$N" "dirichlet-alpha=$ALPHA" lr=0.01 momentum=0.0
      weight-decay=1e-4 batch-size=32 inf-local-epochs=20 inf-augment=crop-flip inf-lr-schedule=cosine
      "data-dir=$DATA" "device=$DEVICE" "inf-probits-dir=$OUT")
pids=()
for s in $SEEDS; do
    fedcal inference-collect "${keys[@]}" "seed=$s" > "$OUT/collect-a$ALPHA-n$N-s$s.log" 2>&1 &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
tail -n 1 "$OUT"/collect-a"$ALPHA"-n"$N"-s*.log
exit $status
