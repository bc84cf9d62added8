#!/usr/bin/env bash
# kill_test.sh [KILLS] [SIGNAL] — interrupted runs.
#   SIGNAL KILL (the default): trains a small model with a checkpoint every step and kills it with
#     SIGKILL at KILLS (default 20) random moments: interrupted writes;
#   SIGNAL TERM (or HUP, INT): checkpoints only at evaluations, so each checkpoint after a signal
#     is the one the signal itself asked for; every run that got the signal must exit 128 + signal
#     and say so, its checkpoint must be at the step it named.
# After every interruption the last checkpoint must load (flashgrad sample reads it). Then it
# resumes to the end and compares every logged loss with an uninterrupted run of the same
# configuration, bit for bit (the CSV prints the losses with all the digits the run's determinism
# promises). Exit 0 when every check holds; prints one line per interruption.
set -u
BIN=${FG_BIN:-build/flashgrad}
KILLS=${1:-20}
SIG=${2:-KILL}
case "$SIG" in
KILL) ckpt=(--ckpt-every 1) steps=1500 ;;
TERM | HUP | INT) ckpt=(--ckpt-every 0) steps=6000 ;; # no checkpoint per step: faster steps

*) echo "kill test: unknown signal '$SIG' (KILL, TERM, HUP or INT)"; exit 2 ;;
esac
STEPS=${KILL_TEST_STEPS:-$steps}
code=$((128 + $(kill -l "$SIG")))
work=$(mktemp -d /tmp/fg_kill.XXXXXX)
trap 'rm -rf "$work"' EXIT
args=(--task addition --digits 2 --n-layer 1 --n-head 2 --n-embd 32 --batch-size 16 --steps "$STEPS"
      --eval-every 20 --eval-iters 2 --eval-problems 20 --samples 0 "${ckpt[@]}" --seed 7 --threads 1)

"$BIN" train "${args[@]}" --out "$work/ref" >/dev/null 2>&1 || { echo "kill test: the reference run failed"; exit 1; }

RANDOM=$$
fails=0
mkdir -p "$work/run"
for k in $(seq 1 "$KILLS"); do
    done_steps=$(awk -F, 'NR>1 {s=$1} END {print s+0}' "$work/run/log.csv" 2>/dev/null)
    [ "${done_steps:-0}" -ge "$STEPS" ] && { echo "kill $k: the run is complete; no more interruptions"; break; }
    resume=()
    [ -f "$work/run/model.safetensors" ] && resume=(--resume)
    "$BIN" train "${args[@]}" --out "$work/run" "${resume[@]}" >"$work/out" 2>&1 &
    pid=$!
    # a random moment: 20 ms to ~0.5 s into the run (a run of STEPS steps takes a few seconds)
    sleep "0.$(printf '%03d' $((RANDOM % 480 + 20)))"
    kill -s "$SIG" "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    if [ "$SIG" != KILL ] && grep -q "interrupted by SIG$SIG at step" "$work/out"; then
        said=$(sed -n "s/.*interrupted by SIG$SIG at step \([0-9]*\).*/\1/p" "$work/out")
        got=$(awk -F, 'NR>1 {s=$1} END {print s+0}' "$work/run/log.csv" 2>/dev/null)
        if [ "$rc" -ne "$code" ] || [ "$said" != "$got" ]; then
            echo "kill $k: SIG$SIG exit $rc (want $code), said step $said, log.csv reaches $got"
            fails=$((fails + 1))
        fi
    elif [ "$SIG" != KILL ] && [ "$rc" -eq 0 ]; then
        echo "kill $k: the run finished before the signal"
    fi
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
leftovers=$(find "$work/run" -name '*.flashgrad-tmp.*' | wc -l)
if [ "$leftovers" -gt 0 ]; then
    echo "kill test: $leftovers temporary file(s) left after the final run"
    fails=$((fails + 1))
fi
if cmp -s <(cut -d, -f1,2,3,4,6 "$work/ref/log.csv") <(cut -d, -f1,2,3,4,6 "$work/run/log.csv"); then
    echo "kill test: $KILLS SIG$SIG, resumed run's losses equal the uninterrupted run's at all $STEPS steps"
else
    echo "kill test: losses differ from the uninterrupted run:"
    diff <(cut -d, -f1,2,3,4,6 "$work/ref/log.csv") <(cut -d, -f1,2,3,4,6 "$work/run/log.csv") | head -10
    fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "kill test: PASS" && exit 0
echo "kill test: FAIL ($fails problems)"
exit 1
