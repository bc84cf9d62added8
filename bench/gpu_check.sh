#!/usr/bin/env bash
# gpu_check.sh — the whole GPU check of flashgrad in one go (`make gpu-check`), meant for one
# H200 and a budget of about 6 minutes:
#   1. build        make cuda (nvcc, -arch=sm_$CUDA_ARCH), all cores
#   2. tests        build-cuda/fg_cuda_tests: every op on the GPU against the CPU, attention flash
#                   vs naive vs CPU (causal or not, dropout or not, float32 and float64, odd sizes,
#                   Nq != Nk) plain and with each variant (GQA, window, ALiBi, softcap, all at
#                   once), determinism of the backward (also under GQA), the GPU's Philox and
#                   cuRAND, the attention commands with --device cuda, errors
#   2b. variants    `flashgrad gradcheck attention --device cuda` for the variants, at sizes that
#                   span several GPU tiles: GPU naive vs finite differences, GPU flash and naive vs
#                   the CPU in float64, GPU flash float32 vs twice GPU naive float32's error
#   3. training     the trainer's GPU tests (fg_cuda_tests train/, run in step 2: a tiny GPT trained
#                   on the GPU and the CPU from the same seed, losses / grad norms / parameters /
#                   AdamW moments compared step by step; device checkpoints restored bit for bit),
#                   then the same through the CLI: `flashgrad train --device cuda` against
#                   `--device cpu` (losses step by step), `flashgrad sample` of the GPU run's
#                   checkpoint, and `flashgrad bench train --device cuda`
#   4. benchmark    flash attention forward/backward ms and TFLOP/s at N = 1k, 4k, 16k, d = 64,
#                   128, causal and not (build-cuda/fg_cuda_bench), beside PyTorch's
#                   scaled_dot_product_attention on the same GPU in the same precision
#                   (bench/attention_torch_gpu.py); then flashgrad alone with variants (GQA 4:1
#                   with a causal 512-key window, ALiBi + softcap) at N = 4k, 16k, d = 128 — skipped
#                   when the check has already used 300 s
# It writes one report, gpu_check_report.md, to $OUT when set, else to bench/results/, and prints
# its summary. Exit status: 0 when the build and the test suite pass, 1 otherwise. Every step has
# its own time limit and a step that runs out of time is reported as such, with what it printed.
#
#   GPU_CHECK_QUICK=1   smaller benchmark (N = 1k, 4k) and the quick test sizes
#   CUDA_ARCH=90        passed to make cuda
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

OUTDIR="${OUT:-bench/results}"
mkdir -p "$OUTDIR"
REPORT="$OUTDIR/gpu_check_report.md"
TMP="$(mktemp -d /tmp/fg_gpu_check.XXXXXX)"
T0=$SECONDS
QUICK="${GPU_CHECK_QUICK:-0}"
JOBS="$(nproc 2>/dev/null || echo 4)"
declare -a SUMMARY=()
OK_BUILD=0
OK_TESTS=0
NO_GPU=0

note() { SUMMARY+=("$1"); echo "gpu_check: $1"; }
elapsed() { echo $((SECONDS - T0)); }
# run LIMIT LOG CMD...: run with a time limit, output to LOG; sets RC (124 = out of time)
run() {
    local limit="$1" log="$2"
    shift 2
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    RC=$?
}
section() { printf '\n## %s\n\n' "$1" >>"$TMP/body.md"; }
code() { { echo '```'; cat "$1"; echo '```'; } >>"$TMP/body.md"; }
code_tail() { { echo '```'; tail -n "$2" "$1"; echo '```'; } >>"$TMP/body.md"; }
: >"$TMP/body.md"

# ---- 0. the machine ----
section "Machine"
{
    echo '```'
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -5
    else
        echo "nvidia-smi: not found"
    fi
    (command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -2) || ls /usr/local/cuda/bin/nvcc 2>&1
    echo "cpus: $JOBS; $(uname -srm)"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
    echo '```'
} >>"$TMP/body.md"

# ---- 1. build ----
section "1. Build (make cuda)"
if command -v make >/dev/null 2>&1; then
    run 240 "$TMP/build.log" make -j"$JOBS" cuda
else
    echo "make is not installed on this machine" >"$TMP/build.log"
    RC=127
fi
if [ $RC -eq 0 ] && [ -x build-cuda/fg_cuda_tests ]; then
    OK_BUILD=1
    note "build: PASS ($(grep -m1 '^cuda: nvcc' "$TMP/build.log" | sed 's/^cuda: //'); $(grep -ci 'warning' "$TMP/build.log") warning lines) [$(elapsed) s]"
    grep -m1 '^cuda: nvcc' "$TMP/build.log" >>"$TMP/body.md"
    echo "" >>"$TMP/body.md"
    echo "Warnings: $(grep -ci 'warning' "$TMP/build.log")" >>"$TMP/body.md"
    grep -i 'warning' "$TMP/build.log" | head -20 >"$TMP/warn.txt" && [ -s "$TMP/warn.txt" ] && code "$TMP/warn.txt"
else
    note "build: FAIL (rc $RC) [$(elapsed) s]"
    code_tail "$TMP/build.log" 60
fi

# ---- 2. tests ----
section "2. GPU test suite (build-cuda/fg_cuda_tests)"
if [ $OK_BUILD -eq 1 ]; then
    targs=()
    [ "$QUICK" = 1 ] && targs+=(--quick)
    run 150 "$TMP/tests.log" build-cuda/fg_cuda_tests ${targs[@]+"${targs[@]}"}
    line="$(grep -m1 '^fg_cuda_tests: [0-9]* passed' "$TMP/tests.log" || true)"
    if [ $RC -eq 0 ]; then
        OK_TESTS=1
        note "tests: PASS — ${line#fg_cuda_tests: } [$(elapsed) s]"
    elif [ $RC -eq 124 ] || [ $RC -eq 137 ]; then
        note "tests: OUT OF TIME after 150 s — ${line:-no summary} [$(elapsed) s]"
    elif [ $RC -eq 77 ]; then
        NO_GPU=1
        note "tests: NO GPU — $(head -1 "$TMP/tests.log") [$(elapsed) s]"
    else
        note "tests: FAIL (rc $RC) — ${line:-no summary; crashed?} [$(elapsed) s]"
    fi
    grep -E '^(FAIL|    )' "$TMP/tests.log" | head -80 >"$TMP/fails.txt" || true
    if [ -s "$TMP/fails.txt" ]; then
        echo "Failures:" >>"$TMP/body.md"
        code "$TMP/fails.txt"
    fi
    echo "Full output:" >>"$TMP/body.md"
    code_tail "$TMP/tests.log" 150
else
    note "tests: SKIPPED (no build)"
fi

# ---- 2b. attention variants: gradcheck on the GPU ----
section "2b. Attention variants on the GPU: flashgrad gradcheck attention --device cuda"
if [ $OK_BUILD -eq 1 ] && [ $NO_GPU -eq 1 ]; then
    note "variants gradcheck: SKIPPED (no GPU)"
elif [ $OK_BUILD -eq 1 ]; then
    # B=1 H=2 Nq=70 Nk=90 d=8: two GPU query tiles and two key tiles, ~5k GPU forwards for the
    # finite differences of each line
    gsz=(--b 1 --h 2 --nq 70 --nk 90 --d 8 --seed 7)
    vpass=0
    vfail=0
    : >"$TMP/variants.log"
    for v in "--causal --dropout 0.1" "--gqa 1 --window 16,4 --causal" "--alibi --softcap 3 --dropout 0.2" \
        "--gqa 1 --window 10,-1 --alibi --softcap 2 --causal --dropout 0.1"; do
        # shellcheck disable=SC2086
        run 40 "$TMP/variant_one.log" build-cuda/flashgrad gradcheck attention --device cuda "${gsz[@]}" $v
        { echo "\$ flashgrad gradcheck attention --device cuda ${gsz[*]} $v   (rc $RC)"; cat "$TMP/variant_one.log"; echo; } \
            >>"$TMP/variants.log"
        if [ $RC -eq 0 ]; then vpass=$((vpass + 1)); else vfail=$((vfail + 1)); fi
    done
    if [ $vfail -eq 0 ]; then
        note "variants gradcheck: PASS ($vpass of 4) [$(elapsed) s]"
    else
        note "variants gradcheck: FAIL ($vfail of 4 failed or ran out of time) [$(elapsed) s]"
        OK_TESTS=0
    fi
    code "$TMP/variants.log"
else
    note "variants gradcheck: SKIPPED (no build)"
fi

# ---- 3. training, GPU against CPU ----
section "3. Training: GPU against CPU, same seed"
if [ $OK_BUILD -eq 1 ]; then
    # the trainer's own GPU-vs-CPU tests ran with the suite in step 2; report them here
    grep -E '^(PASS|FAIL|SKIP) train/' "$TMP/tests.log" >"$TMP/train_tests.txt" 2>/dev/null || true
    if [ -s "$TMP/train_tests.txt" ]; then
        tfail=$(grep -c '^FAIL' "$TMP/train_tests.txt" || true)
        note "training tests (fg_cuda_tests train/): $([ "$tfail" = 0 ] && echo PASS || echo "FAIL ($tfail)") — $(grep -c '^PASS' "$TMP/train_tests.txt" || true) passed"
        grep -E '^(PASS|FAIL|SKIP) train/|^    step [0-9]+: ' "$TMP/tests.log" | head -60 >"$TMP/train_tests_full.txt" || true
        code "$TMP/train_tests_full.txt"
    fi
    targs=(train --task addition --steps 30 --seed 1234 --eval-every 0 --samples 0 --log-every 1)
    run 90 "$TMP/train_gpu.log" build-cuda/flashgrad "${targs[@]}" --device cuda --out "$TMP/run_gpu"
    rc_gpu=$RC
    if [ $rc_gpu -ne 0 ]; then
        why="$(grep -m1 -i 'device cuda\|error\|cuda' "$TMP/train_gpu.log" || tail -1 "$TMP/train_gpu.log")"
        if [ $rc_gpu -eq 2 ] || grep -qi 'not supported\|not implemented\|cuda build' "$TMP/train_gpu.log"; then
            note "training: NOT AVAILABLE — ${why} [$(elapsed) s]"
        else
            note "training: FAIL (GPU run rc $rc_gpu) — ${why} [$(elapsed) s]"
        fi
        code_tail "$TMP/train_gpu.log" 20
    else
        run 150 "$TMP/train_cpu.log" build-cuda/flashgrad "${targs[@]}" --device cpu --out "$TMP/run_cpu"
        if [ $RC -ne 0 ]; then
            note "training: CPU run failed (rc $RC) [$(elapsed) s]"
            code_tail "$TMP/train_cpu.log" 20
        else
            python3 - "$TMP/run_cpu/log.csv" "$TMP/run_gpu/log.csv" >"$TMP/train_cmp.txt" 2>&1 <<'EOF'
import csv, math, sys
def losses(p):
    rows = list(csv.DictReader(open(p)))
    key = "loss" if rows and "loss" in rows[0] else [k for k in rows[0] if "loss" in k][0]
    return [(int(r["step"]), float(r[key])) for r in rows if r.get(key, "") not in ("", "nan")]
cpu, gpu = dict(losses(sys.argv[1])), dict(losses(sys.argv[2]))
steps = sorted(set(cpu) & set(gpu))
worst = 0.0
print("step   cpu loss      gpu loss      rel diff")
for s in steps:
    d = abs(cpu[s] - gpu[s]) / max(abs(cpu[s]), 1e-12)
    worst = max(worst, d)
    print(f"{s:4d}   {cpu[s]:.8f}   {gpu[s]:.8f}   {d:.2e}")
ok = len(steps) > 0 and worst < 1e-3 and all(math.isfinite(gpu[s]) for s in steps)
print(f"RESULT {'PASS' if ok else 'FAIL'} steps={len(steps)} max_rel_diff={worst:.3e} (threshold 1e-3)")
EOF
            res="$(grep '^RESULT' "$TMP/train_cmp.txt" || echo 'RESULT FAIL (could not compare the logs)')"
            note "training: ${res#RESULT } [$(elapsed) s]"
            code "$TMP/train_cmp.txt"
            run 30 "$TMP/sample_gpu.log" build-cuda/flashgrad sample --ckpt "$TMP/run_gpu" --tokens 40 --temperature 0
            note "sample of the GPU checkpoint: $([ $RC -eq 0 ] && echo OK || echo "FAIL (rc $RC)") [$(elapsed) s]"
            code_tail "$TMP/sample_gpu.log" 10
            run 60 "$TMP/bench_train.log" build-cuda/flashgrad bench train --device cuda --steps 20
            if [ $RC -eq 0 ]; then
                note "bench train --device cuda: $(grep -m1 '^throughput' "$TMP/bench_train.log" || echo '?') [$(elapsed) s]"
            else
                note "bench train --device cuda: FAIL (rc $RC) [$(elapsed) s]"
            fi
            code_tail "$TMP/bench_train.log" 12
        fi
    fi
else
    note "training: SKIPPED (no build)"
fi

# ---- 4. benchmark ----
section "4. Attention benchmark: flashgrad flash vs PyTorch SDPA (float32)"
if [ $OK_BUILD -eq 1 ]; then
    ns="1024,4096,16384"
    [ "$QUICK" = 1 ] && ns="1024,4096"
    run 110 "$TMP/fg.csv" build-cuda/fg_cuda_bench --n "$ns" --d 64,128 --budget-ms 300
    rc_fg=$RC
    run 110 "$TMP/torch.csv" python3 bench/attention_torch_gpu.py --n "$ns" --d 64,128 --budget-ms 300
    rc_torch=$RC
    python3 - "$TMP/fg.csv" "$TMP/torch.csv" >"$TMP/bench_table.md" 2>&1 <<'EOF'
import csv, sys
def load(p):
    out = {}
    try:
        for r in csv.DictReader(l for l in open(p) if "," in l and not l.startswith("fg_cuda_bench") and not l.startswith("attention_torch")):
            out[(int(r["N"]), int(r["d"]), int(r["causal"]))] = r
    except Exception as e:
        print(f"(could not read {p}: {e})")
    return out
fg, th = load(sys.argv[1]), load(sys.argv[2])
print("| N | d | causal | B×H | flashgrad fwd ms (TFLOP/s) | torch fwd ms (TFLOP/s) | flashgrad bwd ms (TFLOP/s) | torch bwd ms (TFLOP/s) | torch backend |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(set(fg) | set(th)):
    a, b = fg.get(key), th.get(key)
    cell = lambda r, t: f"{float(r[t + '_ms']):.2f} ({float(r[t + '_tflops']):.1f})" if r and r[t + "_ms"] != "nan" else "—"
    bh = f"{(a or b)['B']}×{(a or b)['H']}"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {bh} | {cell(a, 'fwd')} | {cell(b, 'fwd')} | {cell(a, 'bwd')} | {cell(b, 'bwd')} | {b['impl'] if b else '—'} |")
print(f"\n{len(fg)} flashgrad rows, {len(th)} PyTorch rows (12 expected each for the full run).")
EOF
    cat "$TMP/bench_table.md" >>"$TMP/body.md"
    nfg=$(grep -c '^flash,' "$TMP/fg.csv" || true)
    nth=$(grep -c '^sdpa' "$TMP/torch.csv" || true)
    fgs="flashgrad rc $rc_fg ($nfg rows)"
    [ $rc_fg -eq 124 ] || [ $rc_fg -eq 137 ] && fgs="flashgrad OUT OF TIME ($nfg rows)"
    ths="PyTorch rc $rc_torch ($nth rows)"
    [ $rc_torch -eq 124 ] || [ $rc_torch -eq 137 ] && ths="PyTorch OUT OF TIME ($nth rows)"
    [ $rc_torch -eq 3 ] && ths="PyTorch not available ($(head -1 "$TMP/torch.csv"))"
    note "benchmark: $fgs; $ths [$(elapsed) s]"
    echo "" >>"$TMP/body.md"
    echo "flashgrad (build-cuda/fg_cuda_bench):" >>"$TMP/body.md"
    code "$TMP/fg.csv"
    echo "PyTorch (bench/attention_torch_gpu.py):" >>"$TMP/body.md"
    code "$TMP/torch.csv"
    # variants: flashgrad alone (PyTorch's SDPA has no window or softcap); window FLOPs count the
    # visible pairs only
    if [ $NO_GPU -eq 1 ]; then
        note "benchmark, variants: SKIPPED (no GPU)"
    elif [ "$(elapsed)" -lt 300 ]; then
        vns="4096,16384"
        [ "$QUICK" = 1 ] && vns="4096"
        : >"$TMP/fg_var.csv"
        run 30 "$TMP/fg_var1.csv" build-cuda/fg_cuda_bench --n "$vns" --d 128 --budget-ms 150 --gqa 4 --window 512,-1
        rc_v1=$RC
        run 30 "$TMP/fg_var2.csv" build-cuda/fg_cuda_bench --n "$vns" --d 128 --budget-ms 150 --alibi --softcap 30
        rc_v2=$RC
        cat "$TMP/fg_var1.csv" "$TMP/fg_var2.csv" >"$TMP/fg_var.csv"
        nvar=$(grep -c '^flash,' "$TMP/fg_var.csv" || true)
        note "benchmark, variants: rc $rc_v1/$rc_v2 ($nvar rows) [$(elapsed) s]"
        echo "" >>"$TMP/body.md"
        echo "flashgrad with variants (causal 0/1; GQA 4:1 + window 512,-1, then ALiBi + softcap 30):" >>"$TMP/body.md"
        code "$TMP/fg_var.csv"
    else
        note "benchmark, variants: SKIPPED (the check has used $(elapsed) s)"
    fi
else
    note "benchmark: SKIPPED (no build)"
fi

# ---- the report ----
TOTAL=$(elapsed)
{
    echo "# flashgrad GPU check"
    echo ""
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + local changes'), $TOTAL s in all."
    echo ""
    echo "## Summary"
    echo ""
    for s in "${SUMMARY[@]}"; do echo "- $s"; done
    cat "$TMP/body.md"
} >"$REPORT"
echo "gpu_check: report written to $REPORT ($TOTAL s)"
rm -rf "$TMP"
[ $OK_BUILD -eq 1 ] && [ $OK_TESTS -eq 1 ]
