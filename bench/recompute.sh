#!/bin/sh
# recompute.sh — activation checkpointing on the Tiny Shakespeare configuration.
#
# For each --recompute setting (none, attn, block) runs
#     flashgrad bench train --data tinyshakespeare --recompute S [--attn A] --steps N --warmup-steps W
# (n_layer 4, n_head 4, n_embd 128, block 64, batch 12: bench train's text defaults), and writes
#     bench/results/train_recompute.csv   setting,attn,peak_bytes,peak_mib,step_ms,tokens_per_s,losses_match
# where peak_bytes is the allocation counter's peak during a timed step and step_ms the median step
# time. It then checks that every setting printed the same per-step losses, bit for bit (hex floats);
# exit 1 if not.
#
# Usage: sh bench/recompute.sh [--bin build/flashgrad] [--data FILE] [--steps N] [--warmup W]
#                              [--attn flash|naive] [--dropout P] [--threads T] [--out CSV]
# Defaults: --steps 20 --warmup 3 --attn flash --dropout 0.1 (dropout on, so the recomputation
# must redraw the same masks), data ../shared/datasets/tinyshakespeare/input.txt.
set -eu

BIN=build/flashgrad
DATA=../shared/datasets/tinyshakespeare/input.txt
STEPS=20
WARM=3
ATTN=flash
DROPOUT=0.1
THREADS=
OUT=bench/results/train_recompute.csv
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARM=$2; shift 2 ;;
    --attn) ATTN=$2; shift 2 ;;
    --dropout) DROPOUT=$2; shift 2 ;;
    --threads) THREADS="--threads $2"; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "recompute.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "recompute.sh: no flashgrad binary at $BIN (make first)" >&2; exit 2; }
[ -r "$DATA" ] || { echo "recompute.sh: cannot read $DATA (--data FILE)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$OUT")"
echo "setting,attn,peak_bytes,peak_mib,step_ms,tokens_per_s,losses_match" >"$tmp/csv"
ref=
status=0
for s in none attn block; do
    # shellcheck disable=SC2086
    "$BIN" bench train --data "$DATA" --recompute "$s" --attn "$ATTN" --dropout "$DROPOUT" \
        --steps "$STEPS" --warmup-steps "$WARM" $THREADS >"$tmp/$s.log" 2>&1 || {
        echo "recompute.sh: bench train --recompute $s failed:" >&2; cat "$tmp/$s.log" >&2; exit 1; }
    grep -E '^(bench train|step time|memory|peak bytes)' "$tmp/$s.log" | sed "s/^/[$s] /"
    losses=$(grep '^losses: ' "$tmp/$s.log")
    step_ms=$(sed -n 's/^step time: median \([0-9.]*\) ms.*/\1/p' "$tmp/$s.log")
    tps=$(sed -n 's/^throughput: \([0-9.]*\) tokens.*/\1/p' "$tmp/$s.log")
    peak_mib=$(sed -n 's/^memory.*peak \([0-9.]*\) MiB during a step.*/\1/p' "$tmp/$s.log")
    peak_bytes=$(sed -n 's/^peak bytes: \([0-9]*\).*/\1/p' "$tmp/$s.log")
    if [ -z "$ref" ]; then ref=$losses; match=1
    elif [ "$losses" = "$ref" ]; then match=1
    else match=0; status=1; echo "recompute.sh: --recompute $s changed the losses:" >&2
         echo "  none: $ref" >&2; echo "  $s: $losses" >&2
    fi
    echo "$s,$ATTN,$peak_bytes,$peak_mib,$step_ms,$tps,$match" >>"$tmp/csv"
done
mv "$tmp/csv" "$OUT"
echo "wrote $OUT:"
cat "$OUT"
if [ $status -eq 0 ]; then echo "losses identical across none, attn, block ($((STEPS + WARM)) steps, bit for bit)"; fi
exit $status
