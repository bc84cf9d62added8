#!/bin/sh
# arch_quality.sh — validation loss of the three architectures with AdamW and with Muon on Tiny
# Shakespeare (character level), at `make train-shakespeare`'s size and steps, as one Markdown table.
#
#   sh bench/arch_quality.sh [--bin build/flashgrad] [--data datasets/tinyshakespeare.txt]
#                            [--steps 2000] [--threads 2] [--out FILE.md]
#
# Every run: 4 layers, 4 heads, 128 wide, block 64, batch 12, seed 1337, dropout 0, warm-up 100,
# cosine from --lr 1e-3 to 1e-4, weight decay 0.1, beta2 0.99, clipping 1.0 (the Makefile's
# train-shakespeare). The parameter counts stay within 2% of GPT-2's: the llama MLP is SwiGLU of
# width 344 (3 C I ~ 8 C^2, the 4C GELU MLP's count), nanochat's ReLU^2 MLP is 4C wide. Muon takes
# the hidden matrices at --muon-lr 0.02 (nanochat's matrix learning rate), AdamW the rest at --lr.
# The table's loss and bits per byte are the last evaluation's (train's --eval-iters batches).
# ARCHS="gpt2 llama" and OPTS="muon" (environment) pick a subset of the six runs.
# Runs go to a temporary folder that is removed afterwards; nothing else is written but --out.
set -eu
BIN=build/flashgrad
DATA=datasets/tinyshakespeare.txt
STEPS=2000
THREADS=2
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "arch_quality.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "arch_quality.sh: no flashgrad binary at $BIN (run make first)" >&2; exit 2; }
[ -r "$DATA" ] || { echo "arch_quality.sh: cannot read $DATA (sh datasets/get_tinyshakespeare.sh $DATA)" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fg_arch_quality.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM
TABLE=$TMP/table.md
{
    echo "| architecture | optimizer | parameters | val loss | val bpb | seconds |"
    echo "|---|---|---|---|---|---|"
} > "$TABLE"
for arch in ${ARCHS:-gpt2 llama nanochat}; do
    case $arch in
    llama) archflags="--arch llama --mlp-hidden 344" ;;
    *) archflags="--arch $arch" ;;
    esac
    for opt in ${OPTS:-adamw muon}; do
        optflags="--optimizer $opt"
        [ $opt = muon ] && optflags="$optflags --muon-lr 0.02"
        run=$TMP/$arch-$opt
        start=$(date +%s)
        # shellcheck disable=SC2086
        "$BIN" train --data "$DATA" --out "$run" --threads "$THREADS" --seed 1337 \
            --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps "$STEPS" \
            --lr 1e-3 --min-lr 1e-4 --warmup 100 --dropout 0 --weight-decay 0.1 --beta2 0.99 --grad-clip 1.0 \
            $archflags $optflags > "$run.out" 2>&1 || { cat "$run.out" >&2; exit 1; }
        secs=$(( $(date +%s) - start ))
        params=$(sed -n 's/.* \([0-9.]*M\) parameters.*/\1/p' "$run.out" | head -n 1)
        # the last row of log.csv with a validation loss: columns val_loss (6) and val_bpb (9)
        last=$(awk -F, 'NR > 1 && $6 != "" { v = $6; b = $9 } END { print v " " b }' "$run/log.csv")
        set -- $last
        printf '| %s | %s | %s | %.4f | %.4f | %s |\n' "$arch" "$opt" "${params:-?}" "$1" "$2" "$secs" >> "$TABLE"
        echo "arch_quality: $arch $opt: val loss $1, bpb $2, ${secs}s" >&2
    done
done
cat "$TABLE"
[ -z "$OUT" ] || cp "$TABLE" "$OUT"
