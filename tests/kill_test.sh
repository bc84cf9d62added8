#!/usr/bin/env bash
# kill_test.sh [KILLS] — interrupted writes. Trains a small model with a checkpoint every step,
# kills it with SIGKILL at KILLS (default 20) random moments, and after every kill checks that
# the last checkpoint loads (flashgrad sample reads it). Then it resumes to the end and compares
# every logged loss with an uninterrupted run of the same configuration, bit for bit (the CSV
# prints the losses with all the digits the run's determinism promises).
# Exit 0 when every check holds; prints one line per kill.
set -u
BIN=${FG_BIN:-build/flashgrad}
KILLS=${1:-20}
STEPS=${KILL_TEST_STEPS:-1500}
work=$(mktemp -d /tmp/fg_kill.XXXXXX)
trap 'rm -rf "$work"' EXIT
args=(--task addition --digits 2 --n-layer 1 --n-head 2 --n-embd 32 --batch-size 16 --steps "$STEPS"
      --eval-every 20 --eval-iters 2 --eval-problems 20 --samples 0 --ckpt-every 1 --seed 7 --threads 1)

"$BIN" train "${args[@]}" --out "$work/ref" >/dev/null 2>&1 || { echo "kill test: the reference run failed"; exit 1; }

RANDOM=$$
fails=0
mkdir -p "$work/run"
for k in $(seq 1 "$KILLS"); do
    resume=()
    [ -f "$work/run/model.safetensors" ] && resume=(--resume)
    "$BIN" train "${args[@]}" --out "$work/run" "${resume[@]}" >/dev/null 2>&1 &
    pid=$!
    # a random moment: 20 ms to ~0.5 s into the run (a run of STEPS steps takes a few seconds)
    sleep "0.$(printf '%03d' $((RANDOM % 480 + 20)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ -f "$work/run/model.safetensors" ]; then
        if "$BIN" sample --ckpt "$work/run" --tokens 4 --prompt "1" >/dev/null 2>"$work/err"; then
            step=$(awk -F, 'NR>1 {s=$1} END {print s+0}' "$work/run/log.csv" 2>/dev/null)
            echo "kill $k: checkpoint loads (log reaches step $step)"
        else
            echo "kill $k: checkpoint does NOT load: $(head -1 "$work/err")"
            fails=$((fails + 1))
        fi
    else
        echo "kill $k: killed before the first checkpoint"
    fi
done

# finish the run and compare the losses with the uninterrupted one
resume=()
[ -f "$work/run/model.safetensors" ] && resume=(--resume)
last=$(awk -F, 'NR>1 {s=$1} END {print s+0}' "$work/run/log.csv" 2>/dev/null)
if [ "${last:-0}" -ge "$STEPS" ] && [ -n "${resume[*]}" ]; then
    : # a killed run already got to the end
elif ! "$BIN" train "${args[@]}" --out "$work/run" "${resume[@]}" >/dev/null 2>"$work/err"; then
    echo "kill test: the final resume failed: $(head -1 "$work/err")"
    exit 1
fi
leftovers=$(find "$work/run" -name '*.tmp.*' | wc -l)
if [ "$leftovers" -gt 0 ]; then
    echo "kill test: $leftovers temporary file(s) left after the final run"
    fails=$((fails + 1))
fi
if cmp -s <(cut -d, -f1,2,3,4,6 "$work/ref/log.csv") <(cut -d, -f1,2,3,4,6 "$work/run/log.csv"); then
    echo "kill test: $KILLS kills, resumed run's losses equal the uninterrupted run's at all $STEPS steps"
else
    echo "kill test: losses differ from the uninterrupted run:"
    diff <(cut -d, -f1,2,3,4,6 "$work/ref/log.csv") <(cut -d, -f1,2,3,4,6 "$work/run/log.csv") | head -10
    fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "kill test: PASS" && exit 0
echo "kill test: FAIL ($fails problems)"
exit 1
