#!/bin/sh
# mpi_bench.sh — data-parallel throughput on this machine (`make bench-mpi`): the same global step
# (2 micro-batches of B x T tokens) as P = 1 with 2 threads (--grad-accum 2) and as P = 2 ranks of
# 1 thread each (mpirun, shared-memory transport), at L6 H6 C384 T256 B8 on Tiny Shakespeare.
# Prints, for each run, tokens/s during the training steps and (P = 2) the communication time per
# step, then the best of the ROUNDS alternating repeats of each.
#   STEPS=4 ROUNDS=2 BIN=build/flashgrad DATA=datasets/tinyshakespeare.txt sh bench/mpi_bench.sh
BIN=${BIN:-build/flashgrad}
DATA=${DATA:-datasets/tinyshakespeare.txt}
STEPS=${STEPS:-4}
ROUNDS=${ROUNDS:-2}
command -v mpirun >/dev/null 2>&1 || { echo "mpi_bench: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 1; }
[ -f "$DATA" ] || { echo "mpi_bench: no $DATA (sh datasets/get_tinyshakespeare.sh $DATA)"; exit 1; }
TMP=$(mktemp -d /tmp/fg_mpi_bench.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT
ARGS="--data $DATA --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 8 --dropout 0 \
--steps $STEPS --eval-every 0 --eval-iters 1 --samples 0 --log-every 1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rate() { sed -n 's/^done: .* \([0-9.]*[kM]*\) tokens\/s during training steps$/\1/p' "$1"; }
comm() { sed -n 's/^communication: \([0-9.]*\) ms per step (\([0-9.]*\)%.*/\1 ms (\2%)/p' "$1"; }
tok() { awk -v r="$1" 'BEGIN { m = 1; if (r ~ /k$/) m = 1e3; if (r ~ /M$/) m = 1e6; sub(/[kM]$/, "", r); print r * m }'; }
best1=0 best2=0
printf "%-34s %12s %22s\n" "run" "tokens/s" "communication/step"
for i in $(seq "$ROUNDS"); do
    "$BIN" train $ARGS --threads 2 --grad-accum 2 --out "$TMP/p1" --overwrite >"$TMP/p1.log" 2>&1 ||
        { cat "$TMP/p1.log"; exit 1; }
    r1=$(rate "$TMP/p1.log")
    printf "%-34s %12s %22s\n" "P=1, 2 threads, --grad-accum 2" "$r1" "-"
    mpirun --oversubscribe --mca btl self,vader -np 2 "$BIN" train $ARGS --threads 1 --grad-accum 1 \
        --out "$TMP/p2" --overwrite >"$TMP/p2.log" 2>&1 || { cat "$TMP/p2.log"; exit 1; }
    r2=$(rate "$TMP/p2.log")
    printf "%-34s %12s %22s\n" "P=2, 1 thread each, --grad-accum 1" "$r2" "$(comm "$TMP/p2.log")"
    best1=$(awk -v a="$best1" -v b="$(tok "$r1")" 'BEGIN { print (b > a ? b : a) }')
    best2=$(awk -v a="$best2" -v b="$(tok "$r2")" 'BEGIN { print (b > a ? b : a) }')
done
awk -v a="$best1" -v b="$best2" -v s="$STEPS" -v r="$ROUNDS" 'BEGIN {
    printf "best of %d: P=1 %.0f tokens/s, P=2 %.0f tokens/s (P=2 / P=1 = %.2f), %d steps of 2 x 8 x 256 tokens\n",
        r, a, b, (a > 0 ? b / a : 0), s }'
