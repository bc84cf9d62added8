#!/usr/bin/env bash
# gpu_check.sh — the whole GPU check of flashgrad in one device call (`make gpu-check`).
#
# The report always comes back: $OUT/gpu_check_report.md is rewritten after every step (and from an
# EXIT trap), and every log is written straight into $OUT, so a command cut at its limit (SIGKILL)
# still returns what was done up to that moment. One overall deadline (GPU_CHECK_DEADLINE seconds,
# default 540, inside one device command's 600) caps every step at the time that is left; a step
# with no time left is reported as skipped.
#
# Steps, the most informative first:
#   0. preflight  (<= 10 s) nvidia-smi, driver against the toolkit (a CUDA 13 runtime needs an R580+
#                 driver: an older one stops the check here with one line), nvcc and gcc versions
#                 (nvcc refusing the host gcc is retried with -allow-unsupported-compiler), the CUDA
#                 libraries found, torch's version
#   1. build      make cuda with all cores; ptxas -v for the attention kernels (registers, spills,
#                 shared memory go into the report); the bf16 tensor-core kernels' SASS per kernel
#                 (tests/cuda/check_bf16_sass.sh: HMMA, LDSM, LDGSTS, LDL/STL, stack frame; a
#                 finding fails the check). Never plain make: that would install packages.
#   2. tests      each suite of build-cuda/fg_cuda_tests as its own process with its own limit (a
#                 sticky CUDA fault then costs one suite, not all); attention with
#                 CUDA_LAUNCH_BLOCKING=1 so a fault names its kernel
#                 (runtime/ includes NCCL at P = 1: runtime/nccl_one_rank_folds_and_gathers_exactly)
#   2b. python    the Python package on torch CUDA tensors: make shared-cuda, then
#                 tests/python/test_torch_cuda.py with python3's torch (forward and backward against
#                 flashgrad's CPU and float64, float32 and bf16, causal, GQA, dropout, the SDPA drop-in)
#   3. sanitizer  compute-sanitizer racecheck, synccheck, memcheck on one small flash
#                 forward + backward per dtype (flashgrad attention --device cuda)
#   4. training   flashgrad train --device cuda against --device cpu, same seed, step by step, in
#                 float32 and with --dtype bfloat16 (mixed precision, at bf16 tolerance), and bench
#                 train's tokens/s of each
#   5. benchmark  flash attention against PyTorch's SDPA (bench/attention_torch_gpu.py); the bf16
#                 tensor-core kernels against SDPA's flash and cuDNN backends in bf16 (N = 1k-16k,
#                 d = 64, 128, causal and not; TFLOP/s and the fraction of the dense bf16 peak);
#                 then one ncu pass over the flash kernels at N = 4096 when time is left
# Exit status: 0 when the build and every test suite pass, 1 otherwise. On a machine without a GPU
# (a dry run) the build runs, the tests report "no GPU", the rest is skipped, and the report says so.
#
#   GPU_CHECK_DEADLINE=540   seconds for the whole check
#   GPU_CHECK_QUICK=1        quick test sizes and a smaller benchmark
#   CUDA_ARCH=90             passed to make cuda
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1

T0=$SECONDS
DEADLINE="${GPU_CHECK_DEADLINE:-540}"
QUICK="${GPU_CHECK_QUICK:-0}"
JOBS="$(nproc 2>/dev/null || echo 4)"
OUTDIR="${OUT:-bench/results/gpu-check}"
mkdir -p "$OUTDIR" || exit 1
REPORT="$OUTDIR/gpu_check_report.md"
# at most 8 files come back from a device call: the report and seven logs
BUILD_LOG="$OUTDIR/build.log"
PY_LOG="$OUTDIR/python.log"
TESTS_LOG="$OUTDIR/tests.log"
SAN_LOG="$OUTDIR/sanitizer.log"
TRAIN_LOG="$OUTDIR/train.log"
BENCH_LOG="$OUTDIR/bench.log"
NCU_LOG="$OUTDIR/ncu.log"
SCRATCH="$(mktemp -d /tmp/fg_gpu_check.XXXXXX)" # inputs and run folders only; no log lives here
: >"$TESTS_LOG"
: >"$PY_LOG"
: >"$SAN_LOG"
: >"$TRAIN_LOG"
: >"$BENCH_LOG"

declare -a SUMMARY=()
BODY="$SCRATCH/report_body.md" # the sections so far (copied into the report every time)
: >"$BODY"
OK_BUILD=0
OK_TESTS=1
NO_GPU=0
STEP="starting"

elapsed() { echo $((SECONDS - T0)); }
left() { echo $((DEADLINE - (SECONDS - T0))); }
write_report() {
    {
        echo "# flashgrad GPU check"
        echo ""
        echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + local changes'), $(elapsed) s of a $DEADLINE s deadline; now: $STEP."
        echo ""
        echo "## Summary"
        echo ""
        for s in "${SUMMARY[@]+"${SUMMARY[@]}"}"; do echo "- $s"; done
        cat "$BODY"
        echo ""
        echo "Logs beside this report: build.log, tests.log, python.log, sanitizer.log, train.log, bench.log, ncu.log."
    } >"$REPORT.tmp" && mv -f "$REPORT.tmp" "$REPORT"
}
finish() {
    STEP="finished"
    write_report
    rm -rf "$SCRATCH"
    echo "gpu_check: report written to $REPORT ($(elapsed) s)"
}
trap finish EXIT
trap 'STEP="stopped by a signal"; exit 1' INT TERM HUP

note() {
    SUMMARY+=("$1")
    echo "gpu_check: $1"
    write_report
}
section() { printf '\n## %s\n\n' "$1" >>"$BODY"; }
code() { { echo '```'; cat "$1"; echo '```'; } >>"$BODY"; }
code_tail() { { echo '```'; tail -n "$2" "$1"; echo '```'; } >>"$BODY"; }
begin() {
    STEP="$1 (since $(elapsed) s)"
    write_report
}
# run LIMIT LOG CMD...: CMD with min(LIMIT, time left) seconds, output appended to LOG; RC is its
# status (124 = out of time, 125 = not started: no time left)
run() {
    local limit="$1" log="$2" have
    shift 2
    have=$(($(left) - 3))
    [ "$have" -lt "$limit" ] && limit=$have
    if [ "$limit" -le 0 ]; then
        echo "(not run: no time left) $*" >>"$log"
        RC=125
        return
    fi
    timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
    RC=$?
}
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

# ---- 0. preflight ----
begin "preflight"
section "0. Preflight"
PRE="$SCRATCH/preflight.txt"
{
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 5 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -4
    else
        echo "nvidia-smi: not found"
    fi
    NVCC_BIN="$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)"
    echo "nvcc: ${NVCC_BIN:-not found} $([ -n "$NVCC_BIN" ] && "$NVCC_BIN" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "gcc: $(gcc -dumpfullversion 2>/dev/null || echo 'not found')"
    cuda_home="$(dirname "$(dirname "${NVCC_BIN:-/usr/local/cuda/bin/nvcc}")")"
    for l in cublas curand nccl; do
        f="$(ls "$cuda_home"/lib64/lib$l.so* "$cuda_home"/targets/x86_64-linux/lib/lib$l.so* 2>/dev/null | head -1)"
        echo "lib$l: ${f:-not in the toolkit}"
    done
    echo "openblas: $(ls /usr/lib/*/libopenblas.so 2>/dev/null | head -1 || true)"
    echo "compute-sanitizer: $(command -v compute-sanitizer || ls "$cuda_home"/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
    echo "ncu: $(command -v ncu || ls "$cuda_home"/bin/ncu 2>/dev/null || echo 'not found')"
    echo "cpus: $JOBS; $(uname -srm)"
    timeout 8 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
} >"$PRE" 2>&1
code "$PRE"
NVCC_BIN="$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)"
CUDA_HOME_DIR="$(dirname "$(dirname "${NVCC_BIN:-/usr/local/cuda/bin/nvcc}")")"
SANITIZER="$(command -v compute-sanitizer || ls "$CUDA_HOME_DIR"/bin/compute-sanitizer 2>/dev/null || true)"
NCU="$(command -v ncu || ls "$CUDA_HOME_DIR"/bin/ncu 2>/dev/null || true)"
tk="$([ -n "$NVCC_BIN" ] && "$NVCC_BIN" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
drv="$(timeout 5 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)"
if [ -z "$drv" ]; then
    NO_GPU=1
    note "preflight: no GPU visible (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists none' || echo 'not found')); the build still runs, GPU steps are skipped [$(elapsed) s]"
else
    # the oldest driver each toolkit's runtime runs on (NVIDIA's compatibility table)
    need=0
    case "$tk" in 13) need=580 ;; 12) need=525 ;; 11) need=450 ;; esac
    if [ "$need" -gt 0 ] && [ "$drv" -lt "$need" ]; then
        note "preflight: STOP — driver R$drv is older than CUDA $tk's runtime needs (R$need or newer): every kernel would fail to load [$(elapsed) s]"
        exit 1
    fi
    note "preflight: driver R$drv, CUDA $tk toolkit [$(elapsed) s]"
fi
# nvcc may refuse the host gcc: try a trivial kernel once, and allow the compiler if that is why
NVCC_HOST=""
if [ -n "$NVCC_BIN" ]; then
    printf '__global__ void k(int *p) { *p = 1; }\nint main() { return 0; }\n' >"$SCRATCH/probe.cu"
    if ! timeout 20 "$NVCC_BIN" -c "$SCRATCH/probe.cu" -o "$SCRATCH/probe.o" >"$SCRATCH/probe.log" 2>&1; then
        if grep -qi 'unsupported.*version\|gcc versions later than' "$SCRATCH/probe.log"; then
            NVCC_HOST="-allow-unsupported-compiler"
            note "preflight: nvcc refuses gcc $(gcc -dumpfullversion 2>/dev/null); building with -allow-unsupported-compiler"
        else
            note "preflight: nvcc cannot compile a trivial kernel: $(head -1 "$SCRATCH/probe.log")"
        fi
    fi
fi

# ---- 1. build ----
begin "build"
section "1. Build (make cuda)"
: >"$BUILD_LOG"
if ! command -v make >/dev/null 2>&1; then
    echo "make is not installed on this machine" >"$BUILD_LOG"
    RC=127
elif [ -z "$NVCC_BIN" ]; then
    echo "nvcc not found" >"$BUILD_LOG"
    RC=127
else
    # (the bf16 SASS check runs below, so a finding there fails the check without stopping the build)
    run 300 "$BUILD_LOG" make -j"$JOBS" cuda PTXAS_VERBOSE=1 NVCC_HOST_FLAGS="$NVCC_HOST" BF16_SASS_CHECK=0
fi
if [ $RC -eq 0 ] && [ -x build-cuda/fg_cuda_tests ]; then
    OK_BUILD=1
    nwarn=$(grep -i 'warning' "$BUILD_LOG" | grep -vc 'ptxas info' || true)
    note "build: PASS ($(grep -m1 '^cuda: nvcc' "$BUILD_LOG" | sed 's/^cuda: //'); $nwarn warning lines) [$(elapsed) s]"
    grep -i 'warning' "$BUILD_LOG" | grep -v 'ptxas info' | head -20 >"$SCRATCH/warn.txt"
    [ -s "$SCRATCH/warn.txt" ] && code "$SCRATCH/warn.txt"
    # registers, spills and shared memory of the attention kernels (ptxas -v)
    grep -E "ptxas info *: (Compiling entry|Function properties|Used [0-9]+ registers)|bytes (stack frame|spill)" "$BUILD_LOG" |
        sed -E 's/ptxas info *: //' >"$SCRATCH/ptxas.txt" || true
    if [ -s "$SCRATCH/ptxas.txt" ]; then
        # one line per kernel (entry name demangled, then its registers / spills / static shared
        # memory), float32 instances first; dynamic shared memory never shows in ptxas -v
        filt="$(command -v cu++filt || ls "$CUDA_HOME_DIR"/bin/cu++filt 2>/dev/null || command -v c++filt || echo cat)"
        awk '/^Compiling entry function/ { if (k) print k " :: " v; k = $0; sub(/^Compiling entry function .?/, "", k); sub(/.? for .*$/, "", k); v = ""; next }
             { v = v (v ? "; " : "") $0 } END { if (k) print k " :: " v }' "$SCRATCH/ptxas.txt" >"$SCRATCH/ptxas_k.txt"
        cut -d' ' -f1 "$SCRATCH/ptxas_k.txt" | $filt >"$SCRATCH/ptxas_names.txt" 2>/dev/null || cp "$SCRATCH/ptxas_k.txt" "$SCRATCH/ptxas_names.txt"
        paste -d'|' "$SCRATCH/ptxas_names.txt" <(sed 's/^[^ ]* :: //' "$SCRATCH/ptxas_k.txt") |
            awk -F'|' '{ print ($1 ~ /float/ ? 0 : 1) "|" $0 }' | sort -s -t'|' -k1,1 | cut -d'|' -f2- | sed 's/|/ :: /' >"$SCRATCH/ptxas_all.txt"
        echo "ptxas -v for cuda/attention.cu, every kernel ($(wc -l <"$SCRATCH/ptxas_all.txt")), demangled, float32 first:" >>"$BODY"
        code "$SCRATCH/ptxas_all.txt"
    else
        echo "ptxas -v for cuda/attention.cu: (none in build.log: cuda/attention.o was not recompiled; rm it to see them)" >>"$BODY"
    fi
    # SASS: local-memory loads and stores (spills, stack arrays) per kernel, and the FFMA to LDS ratio
    CUOBJDUMP="$(command -v cuobjdump || ls "$CUDA_HOME_DIR"/bin/cuobjdump 2>/dev/null || true)"
    if [ -n "$CUOBJDUMP" ] && [ -f build-cuda/cuda/attention.o ]; then
        "$CUOBJDUMP" -sass build-cuda/cuda/attention.o 2>/dev/null | awk '
            /Function :/ { if (f) printf "%s  LDL %d  STL %d  FFMA %d  LDS %d  FFMA/LDS %.2f\n", f, ldl, stl, ffma, lds, lds ? ffma / lds : 0; f = $3; ldl = stl = ffma = lds = 0; next }
            / LDL/ { ldl++ } / STL/ { stl++ } / FFMA / { ffma++ } / LDS/ { lds++ }
            END { if (f) printf "%s  LDL %d  STL %d  FFMA %d  LDS %d  FFMA/LDS %.2f\n", f, ldl, stl, ffma, lds, lds ? ffma / lds : 0 }' >"$SCRATCH/sass.txt"
        echo "SASS (cuobjdump) per attention kernel: local loads/stores, FFMA and LDS counts (whole kernel, not only the inner loop):" >>"$BODY"
        code "$SCRATCH/sass.txt"
    else
        echo "SASS (cuobjdump): (not available: $([ -z "$CUOBJDUMP" ] && echo 'cuobjdump not found' || echo 'no attention.o'))" >>"$BODY"
    fi
    # the bf16 tensor-core kernels: HMMA, ldmatrix, cp.async present; no spills or local memory
    CUOBJDUMP="$CUOBJDUMP" bash tests/cuda/check_bf16_sass.sh build-cuda/cuda/attention_bf16.o >"$SCRATCH/sass_bf16.txt" 2>&1
    rc_sass=$?
    echo "bf16 tensor-core kernels (tests/cuda/check_bf16_sass.sh: registers, stack frame and local memory as ptxas recorded them; SASS counts of HMMA = mma.sync, LDSM = ldmatrix, LDGSTS = cp.async, LDL/STL = local memory):" >>"$BODY"
    code "$SCRATCH/sass_bf16.txt"
    if grep -q "NOT checked" "$SCRATCH/sass_bf16.txt"; then
        note "bf16 SASS: NOT CHECKED (no cuobjdump on this machine) [$(elapsed) s]"
    elif [ $rc_sass -eq 0 ]; then
        note "bf16 SASS: $(tail -1 "$SCRATCH/sass_bf16.txt" | sed 's/^check_bf16_sass: //') [$(elapsed) s]"
    else
        note "bf16 SASS: FAIL — $(tail -1 "$SCRATCH/sass_bf16.txt" | sed 's/^check_bf16_sass: //') [$(elapsed) s]"
        OK_TESTS=0
    fi
else
    timed_out $RC && note "build: OUT OF TIME [$(elapsed) s]" || note "build: FAIL (rc $RC) [$(elapsed) s]"
    code_tail "$BUILD_LOG" 60
    OK_TESTS=0
fi

# ---- 2. tests, one process per suite ----
section "2. GPU test suites (build-cuda/fg_cuda_tests, one process each)"
if [ $OK_BUILD -eq 1 ]; then
    qa=()
    [ "$QUICK" = 1 ] && qa=(--quick)
    for suite in runtime:40 device:40 ops:90 attention:150 train:120; do
        name=${suite%%:*}
        lim=${suite##*:}
        begin "tests: $name"
        echo "===== fg_cuda_tests $name/ =====" >>"$TESTS_LOG"
        from=$(wc -l <"$TESTS_LOG")
        if [ "$name" = attention ]; then
            run "$lim" "$TESTS_LOG" env CUDA_LAUNCH_BLOCKING=1 build-cuda/fg_cuda_tests ${qa[@]+"${qa[@]}"} "$name/"
        else
            run "$lim" "$TESTS_LOG" build-cuda/fg_cuda_tests ${qa[@]+"${qa[@]}"} "$name/"
        fi
        tail -n +$((from + 1)) "$TESTS_LOG" >"$SCRATCH/suite.txt"
        line="$(grep -m1 '^fg_cuda_tests: [0-9]* passed' "$SCRATCH/suite.txt" || true)"
        if [ $RC -eq 0 ]; then
            note "tests $name/: PASS — ${line#fg_cuda_tests: } [$(elapsed) s]"
        elif [ $RC -eq 77 ]; then
            NO_GPU=1
            note "tests $name/: NO GPU — $(grep -v '^=====' "$SCRATCH/suite.txt" | head -1) [$(elapsed) s]"
            OK_TESTS=0
            break
        elif [ $RC -eq 125 ]; then
            note "tests $name/: SKIPPED (no time left)"
            OK_TESTS=0
        elif timed_out $RC; then
            note "tests $name/: OUT OF TIME after $lim s — ${line:-no summary} [$(elapsed) s]"
            OK_TESTS=0
        else
            note "tests $name/: FAIL (rc $RC) — ${line:-no summary; crashed?} [$(elapsed) s]"
            OK_TESTS=0
        fi
        grep -E '^(FAIL|    )' "$SCRATCH/suite.txt" | head -40 >"$SCRATCH/fails.txt" || true
        [ -s "$SCRATCH/fails.txt" ] && { echo "$name/ failures:" >>"$BODY"; code "$SCRATCH/fails.txt"; }
    done
else
    note "tests: SKIPPED (no build)"
fi

# ---- 2b. the Python package on torch CUDA tensors ----
section "2b. Python: flashgrad.torch on CUDA tensors (tests/python/test_torch_cuda.py)"
if [ $OK_BUILD -eq 1 ] && [ $NO_GPU -eq 0 ]; then
    begin "python: make shared-cuda"
    run 240 "$PY_LOG" make -j"$JOBS" shared-cuda NVCC_HOST_FLAGS="$NVCC_HOST"
    if [ $RC -ne 0 ]; then
        timed_out $RC && note "python: build OUT OF TIME [$(elapsed) s]" || note "python: build FAIL (rc $RC) [$(elapsed) s]"
        OK_TESTS=0
    else
        begin "python: pytest"
        from=$(wc -l <"$PY_LOG")
        run 40 "$PY_LOG" env FLASHGRAD_LIB="$PWD/build-cuda/libflashgrad.so" PYTHONPATH="$PWD/python" FG_TORCH=1 \
            PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_torch_cuda.py tests/python/test_cuda_flat.py
        tail -n +$((from + 1)) "$PY_LOG" >"$SCRATCH/py.txt"
        line="$(grep -E '[0-9]+ (passed|failed)' "$SCRATCH/py.txt" | tail -1 || true)"
        if [ $RC -eq 0 ] && grep -qE 'no CUDA device|built without CUDA' "$SCRATCH/py.txt"; then
            note "python: NOT RUN — the CUDA tests skipped ($(grep -m1 -oE 'no CUDA device|built without CUDA[^)]*' "$SCRATCH/py.txt")) [$(elapsed) s]"
            OK_TESTS=0
        elif [ $RC -eq 0 ]; then
            note "python: PASS — $line [$(elapsed) s]"
        elif timed_out $RC; then
            note "python: OUT OF TIME after 40 s — ${line:-no summary} [$(elapsed) s]"
            OK_TESTS=0
        else
            note "python: FAIL (rc $RC) — ${line:-no summary} [$(elapsed) s]"
            OK_TESTS=0
        fi
        grep -E '^(FAILED|ERROR|E  )' "$SCRATCH/py.txt" | head -30 >"$SCRATCH/pyfail.txt" || true
        [ -s "$SCRATCH/pyfail.txt" ] && code "$SCRATCH/pyfail.txt"
    fi
else
    note "python: SKIPPED ($([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))"
fi

# small .npy inputs for the sanitizer and ncu (Python's standard library only: no numpy needed)
make_npy() { # make_npy DIR DTYPE(f4|f8) B H N D
    python3 - "$@" <<'EOF'
import os, random, struct, sys
d, dt, B, H, N, D = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
os.makedirs(d, exist_ok=True)
rnd = random.Random(7)
for name in ("q", "k", "v", "do"):
    hdr = "{'descr': '<%s', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }" % (dt, B, H, N, D)
    hdr += " " * (63 - (len(hdr) + 10) % 64) + "\n"
    vals = [rnd.gauss(0, 1) for _ in range(B * H * N * D)]
    with open(os.path.join(d, name + ".npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%d%s" % (len(vals), "f" if dt == "f4" else "d"), *vals))
EOF
}

# ---- 3. compute-sanitizer on one small flash forward + backward per dtype ----
section "3. compute-sanitizer: memcheck, racecheck, synccheck, initcheck (flash forward + backward; the attention test suite; the benchmark's calls)"
if [ $OK_BUILD -eq 0 ] || [ $NO_GPU -eq 1 ]; then
    note "sanitizer: SKIPPED ($([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))"
elif [ -z "$SANITIZER" ]; then
    note "sanitizer: SKIPPED (compute-sanitizer not found)"
else
    : >"$SCRATCH/san_summary.txt"
    for dt in f4 f8; do
        dtname=float32
        [ "$dt" = f8 ] && dtname=float64
        make_npy "$SCRATCH/in_$dt" "$dt" 1 2 200 64 >>"$SAN_LOG" 2>&1
        for tool in racecheck synccheck memcheck; do
            begin "sanitizer: $tool $dt"
            echo "===== $tool, $dtname =====" >>"$SAN_LOG"
            from=$(wc -l <"$SAN_LOG")
            run 40 "$SAN_LOG" "$SANITIZER" --tool "$tool" --error-exitcode 9 build-cuda/flashgrad attention --device cuda \
                --causal --q "$SCRATCH/in_$dt/q.npy" --k "$SCRATCH/in_$dt/k.npy" --v "$SCRATCH/in_$dt/v.npy" \
                --do "$SCRATCH/in_$dt/do.npy" --out "$SCRATCH/san_out_$dt"
            summary="$(tail -n +$((from + 1)) "$SAN_LOG" | grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' || true)"
            res="rc $RC"
            [ $RC -eq 0 ] && res="clean"
            [ $RC -eq 9 ] && res="ERRORS"
            timed_out $RC && res="out of time"
            [ $RC -eq 125 ] && res="not run (no time left)"
            echo "$tool $dtname: $res${summary:+ — $summary}" >>"$SCRATCH/san_summary.txt"
            { [ $RC -ne 0 ]; } && OK_TESTS=0
        done
    done
    # every attention instance the tests build (d, variants, dropout, both dtypes), quick sizes
    for tool in memcheck racecheck synccheck initcheck; do
        begin "sanitizer: $tool attention tests"
        echo "===== $tool, fg_cuda_tests --quick attention/ =====" >>"$SAN_LOG"
        run 60 "$SAN_LOG" "$SANITIZER" --tool "$tool" --error-exitcode 9 build-cuda/fg_cuda_tests --quick attention/
        res="rc $RC"; [ $RC -eq 0 ] && res="clean"; [ $RC -eq 9 ] && res="ERRORS"
        echo "$tool fg_cuda_tests attention/: $res" >>"$SCRATCH/san_summary.txt"
        [ $RC -ne 0 ] && OK_TESTS=0
    done
    # the benchmark's own calls (fg_cuda_bench: its buffers, every variant instance), small shapes
    for tool in memcheck racecheck synccheck initcheck; do
        for bargs in "--dtype f32" "--dtype f64" "--dtype f32 --alibi --softcap 30" "--dtype f32 --impl naive" \
            "--dtype bf16"; do
            begin "sanitizer: $tool fg_cuda_bench $bargs"
            echo "===== $tool, fg_cuda_bench $bargs =====" >>"$SAN_LOG"
            dl=64,128,256
            case "$bargs" in *bf16*) dl=64,128 ;; esac # the tensor-core kernels' widths
            # shellcheck disable=SC2086
            run 40 "$SAN_LOG" "$SANITIZER" --tool "$tool" --error-exitcode 9 build-cuda/fg_cuda_bench --n 128 --d "$dl" \
                --tokens 128 --hidden 512 --budget-ms 1 $bargs
            res="rc $RC"; [ $RC -eq 0 ] && res="clean"; [ $RC -eq 9 ] && res="ERRORS"
            echo "$tool fg_cuda_bench $bargs: $res" >>"$SCRATCH/san_summary.txt"
            [ $RC -ne 0 ] && OK_TESTS=0
        done
    done
    code "$SCRATCH/san_summary.txt"
    if grep -q "ERRORS\|rc [1-9]" "$SCRATCH/san_summary.txt"; then
        note "sanitizer: FINDINGS (see sanitizer.log) [$(elapsed) s]"
    else
        note "sanitizer: $(grep -c clean "$SCRATCH/san_summary.txt") of $(wc -l <"$SCRATCH/san_summary.txt") runs clean [$(elapsed) s]"
    fi
fi

# ---- 4. training, GPU against CPU ----
section "4. Training: GPU against CPU, same seed"
if [ $OK_BUILD -eq 0 ] || [ $NO_GPU -eq 1 ]; then
    note "training: SKIPPED ($([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))"
else
    begin "training"
    targs=(train --task addition --steps 30 --seed 1234 --eval-every 0 --samples 0 --log-every 1)
    echo "===== train --device cuda =====" >>"$TRAIN_LOG"
    run 90 "$TRAIN_LOG" build-cuda/flashgrad "${targs[@]}" --device cuda --out "$SCRATCH/run_gpu"
    rc_gpu=$RC
    echo "===== train --device cpu =====" >>"$TRAIN_LOG"
    [ $rc_gpu -eq 0 ] && run 120 "$TRAIN_LOG" build-cuda/flashgrad "${targs[@]}" --device cpu --out "$SCRATCH/run_cpu"
    if [ $rc_gpu -ne 0 ] || [ $RC -ne 0 ]; then
        note "training: FAIL (GPU run rc $rc_gpu, CPU run rc $RC) [$(elapsed) s]"
        OK_TESTS=0
    else
        # The key bias's gradient is exactly 0 in exact arithmetic (softmax ignores a per-row shift),
        # so each device's value there is rounding noise that AdamW's g/(|g|+eps) turns into
        # lr-sized, device-dependent steps: compare losses, which that slice cannot move at first
        # order, rather than parameters.
        # cmp_losses.py CPU_LOG GPU_LOG THRESHOLD: the losses step by step, then RESULT PASS or FAIL
        cat >"$SCRATCH/cmp_losses.py" <<'EOF'
import csv, math, sys
def losses(p):
    return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(p)) if r.get("loss", "") not in ("", "nan")}
cpu, gpu = losses(sys.argv[1]), losses(sys.argv[2])
thr = float(sys.argv[3])
steps = sorted(set(cpu) & set(gpu))
worst = 0.0
print("step   cpu loss      gpu loss      rel diff")
for s in steps:
    d = abs(cpu[s] - gpu[s]) / max(abs(cpu[s]), 1e-12)
    worst = max(worst, d)
    print(f"{s:4d}   {cpu[s]:.8f}   {gpu[s]:.8f}   {d:.2e}")
ok = len(steps) > 0 and worst < thr and all(math.isfinite(gpu[s]) for s in steps)
print(f"RESULT {'PASS' if ok else 'FAIL'} steps={len(steps)} max_rel_diff={worst:.3e} (threshold {thr:g})")
EOF
        python3 "$SCRATCH/cmp_losses.py" "$SCRATCH/run_cpu/log.csv" "$SCRATCH/run_gpu/log.csv" 1e-3 >"$SCRATCH/train_cmp.txt" 2>&1
        res="$(grep '^RESULT' "$SCRATCH/train_cmp.txt" || echo 'RESULT FAIL (could not compare the logs)')"
        note "training: ${res#RESULT } [$(elapsed) s]"
        case "$res" in *FAIL*) OK_TESTS=0 ;; esac
        code "$SCRATCH/train_cmp.txt"
        echo "===== bench train --device cuda =====" >>"$TRAIN_LOG"
        run 60 "$TRAIN_LOG" build-cuda/flashgrad bench train --device cuda --steps 20
        note "bench train --device cuda: $([ $RC -eq 0 ] && (grep -m1 '^throughput' "$TRAIN_LOG" || echo done) || echo "rc $RC") [$(elapsed) s]"
        # bfloat16 mixed precision: the same run against the CPU's float32 losses at bf16 tolerance
        # (8-bit operands part the curves by ~1e-3 over these steps; a wrong product by percents)
        echo "===== train --device cuda --dtype bfloat16 =====" >>"$TRAIN_LOG"
        run 60 "$TRAIN_LOG" build-cuda/flashgrad "${targs[@]}" --device cuda --dtype bfloat16 --out "$SCRATCH/run_bf16"
        if [ $RC -ne 0 ]; then
            note "training bfloat16: FAIL (rc $RC) [$(elapsed) s]"
            OK_TESTS=0
        else
            python3 "$SCRATCH/cmp_losses.py" "$SCRATCH/run_cpu/log.csv" "$SCRATCH/run_bf16/log.csv" 2e-2 >"$SCRATCH/train_bf16.txt" 2>&1
            res="$(grep '^RESULT' "$SCRATCH/train_bf16.txt" || echo 'RESULT FAIL (could not compare the logs)')"
            note "training bfloat16 against the CPU's float32: ${res#RESULT } [$(elapsed) s]"
            case "$res" in *FAIL*) OK_TESTS=0 ;; esac
            code "$SCRATCH/train_bf16.txt"
        fi
        echo "===== bench train --device cuda --dtype bfloat16 =====" >>"$TRAIN_LOG"
        run 60 "$TRAIN_LOG" build-cuda/flashgrad bench train --device cuda --dtype bfloat16 --steps 20
        note "bench train --device cuda --dtype bfloat16: $([ $RC -eq 0 ] && (grep '^throughput' "$TRAIN_LOG" | tail -n 1 || echo done) || echo "rc $RC") [$(elapsed) s]"
    fi
fi

# ---- 5. benchmark against PyTorch's SDPA, then ncu ----
section "5. Attention benchmark: flashgrad flash vs PyTorch SDPA (float32)"
if [ $OK_BUILD -eq 0 ] || [ $NO_GPU -eq 1 ]; then
    note "benchmark: SKIPPED ($([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))"
    echo "Flash kernels' resources (fg_cuda_bench --kernels: dynamic shared memory, K/V stages, registers, local memory, blocks per SM at D = 64/128/256): (none: $([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))" >>"$BODY"
    echo "flashgrad naive (cuBLAS) rows and fractions of the device's FMA peak: (none: $([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))" >>"$BODY"
    echo "bf16 tensor cores, flashgrad vs PyTorch SDPA flash and cuDNN: (none: $([ $OK_BUILD -eq 0 ] && echo 'no build' || echo 'no GPU'))" >>"$BODY"
else
    # the flash kernels' resources on this device: shared memory and occupancy never show in ptxas -v
    begin "kernel resources"
    run 30 "$SCRATCH/kernels.csv" build-cuda/fg_cuda_bench --kernels
    echo "Flash kernels' resources (fg_cuda_bench --kernels; rc $RC): dynamic shared memory, K/V stages, __launch_bounds__ blocks, registers, local memory (spills), cudaOccupancyMaxActiveBlocksPerMultiprocessor at 256 threads:" >>"$BODY"
    grep -v '^fg_cuda_bench' "$SCRATCH/kernels.csv" >"$SCRATCH/kernels_t.csv"
    code "$SCRATCH/kernels_t.csv"
    [ $RC -ne 0 ] && OK_TESTS=0
    ns="1024,4096,16384"
    [ "$QUICK" = 1 ] && ns="1024,4096"
    begin "benchmark: flashgrad"
    # clocks, power and temperature every 200 ms while the benchmark runs
    timeout 200 nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 200 >"$SCRATCH/clocks.csv" 2>&1 &
    SMI_PID=$!
    run 100 "$SCRATCH/fg.csv" build-cuda/fg_cuda_bench --n "$ns" --d 64,128 --budget-ms 300
    rc_fg=$RC
    kill "$SMI_PID" 2>/dev/null
    echo "Clocks and power during the flashgrad benchmark (nvidia-smi every 200 ms; min / median / max):" >>"$BODY"
    python3 - "$SCRATCH/clocks.csv" >>"$BODY" 2>&1 <<'EOF2'
import sys
rows = [l.split(",") for l in open(sys.argv[1]).read().splitlines()[1:] if l.count(",") >= 4]
def col(k):
    v = sorted(float(r[k].split()[0]) for r in rows if r[k].split() and r[k].split()[0].replace(".", "").isdigit())
    return f"{v[0]:g} / {v[len(v) // 2]:g} / {v[-1]:g}" if v else "—"
print("```")
print(f"samples {len(rows)}; SM MHz {col(1)}; memory MHz {col(2)}; power W {col(3)}; temperature C {col(4)}")
print("```")
EOF2
    [ $rc_fg -ne 0 ] && OK_TESTS=0 # a benchmark failure fails the check
    # flashgrad's naive attention (cuBLAS GEMMs + row kernels; stores P, so N <= 4096)
    begin "benchmark: flashgrad naive"
    run 100 "$SCRATCH/fg_naive.csv" build-cuda/fg_cuda_bench --impl naive --n 1024,4096 --d 64,128 --budget-ms 300
    rc_naive=$RC
    [ $rc_naive -ne 0 ] && OK_TESTS=0
    begin "benchmark: PyTorch"
    run 100 "$SCRATCH/torch.csv" python3 bench/attention_torch_gpu.py --n "$ns" --d 64,128 --budget-ms 300
    rc_torch=$RC
    { echo "===== fg_cuda_bench (rc $rc_fg) ====="; cat "$SCRATCH/fg.csv"; echo "===== fg_cuda_bench --impl naive (rc $rc_naive) ====="; cat "$SCRATCH/fg_naive.csv"; echo "===== attention_torch_gpu.py (rc $rc_torch) ====="; cat "$SCRATCH/torch.csv"; } >>"$BENCH_LOG"
    python3 - "$SCRATCH/fg.csv" "$SCRATCH/torch.csv" "$SCRATCH/fg_naive.csv" >"$SCRATCH/bench_table.md" 2>&1 <<'EOF'
import csv, sys
def load(p):
    out = {}
    try:
        for r in csv.DictReader(l for l in open(p) if "," in l and not l.startswith(("fg_cuda_bench", "attention_torch", "("))):
            out[(int(r["N"]), int(r["d"]), int(r["causal"]))] = r
    except Exception as e:
        print(f"(could not read {p}: {e})")
    return out
fg, th, nv = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
# the device's float32 FMA peak (fg_cuda_bench's peak_tflops): every TFLOP/s also as a fraction of it
peak = next((float(r["peak_tflops"]) for r in list(fg.values()) + list(nv.values()) if r.get("peak_tflops")), 0.0)
print(f"ms (TFLOP/s, fraction of the float32 FMA peak of {peak:.1f} TFLOP/s; PyTorch's float32 SDPA runs on tensor cores, so its fraction can pass 1)")
print()
print("| N | d | causal | B×H | flashgrad fwd | naive fwd | torch fwd | flashgrad bwd | naive bwd | torch bwd | torch backend |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def cell(r, t):
    if not r or r[t + "_ms"] == "nan":
        return "—"
    tf = float(r[t + "_tflops"])
    return f"{float(r[t + '_ms']):.2f} ({tf:.1f}, {tf / peak:.2f})" if peak else f"{float(r[t + '_ms']):.2f} ({tf:.1f})"
for key in sorted(set(fg) | set(th) | set(nv)):
    a, b, c = fg.get(key), th.get(key), nv.get(key)
    r0 = a or b or c
    bh = f"{r0['B']}×{r0['H']}"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {bh} | {cell(a, 'fwd')} | {cell(c, 'fwd')} | {cell(b, 'fwd')} | {cell(a, 'bwd')} | {cell(c, 'bwd')} | {cell(b, 'bwd')} | {b['impl'] if b else '—'} |")
print(f"\n{len(fg)} flashgrad flash rows, {len(nv)} flashgrad naive rows, {len(th)} PyTorch rows.")
EOF
    cat "$SCRATCH/bench_table.md" >>"$BODY"
    note "benchmark: flashgrad rc $rc_fg, naive rc $rc_naive, PyTorch rc $rc_torch [$(elapsed) s]"
    # the bf16 tensor-core kernels (cuda/attention_bf16.h) beside PyTorch's bf16 SDPA with its flash
    # and cuDNN backends pinned, a row each; the median of at least 3 runs within 50 ms per
    # measurement, so large N gets few repeats
    nb="1024,2048,4096,8192,16384"
    [ "$QUICK" = 1 ] && nb="1024,4096"
    begin "benchmark: bf16 tensor cores"
    run 75 "$SCRATCH/fg_bf16.csv" build-cuda/fg_cuda_bench --dtype bf16 --n "$nb" --d 64,128 --budget-ms 50
    rc_fgb=$RC
    [ $rc_fgb -ne 0 ] && OK_TESTS=0
    begin "benchmark: PyTorch bf16 flash, cuDNN"
    run 90 "$SCRATCH/torch_bf16.csv" python3 bench/attention_torch_gpu.py --dtype bfloat16 --backends flash,cudnn \
        --n "$nb" --d 64,128 --budget-ms 50
    rc_thb=$RC
    { echo "===== fg_cuda_bench --dtype bf16 (rc $rc_fgb) ====="; cat "$SCRATCH/fg_bf16.csv"; echo "===== attention_torch_gpu.py --dtype bfloat16 --backends flash,cudnn (rc $rc_thb) ====="; cat "$SCRATCH/torch_bf16.csv"; } >>"$BENCH_LOG"
    python3 - "$SCRATCH/fg_bf16.csv" "$SCRATCH/torch_bf16.csv" >"$SCRATCH/bench_bf16.md" 2>&1 <<'EOF3'
import csv, math, sys
rows = []
for p in sys.argv[1:3]:
    try:
        rows += list(csv.DictReader(l for l in open(p) if "," in l and not l.startswith(("fg_cuda_bench", "attention_torch", "("))))
    except Exception as e:
        print(f"(could not read {p}: {e})")
# the dense bf16 tensor-core peak: fg_cuda_bench's (NVIDIA's H100/H200 SXM datasheet, 989.4 TFLOP/s
# at 132 SMs, scaled by the SM count), else the datasheet figure itself
peak = next((float(r["peak_tflops"]) for r in rows if r.get("peak_tflops") and float(r["peak_tflops"]) > 0), 989.4)
impls = [("flash", "flashgrad"), ("sdpa-flash", "SDPA flash"), ("sdpa-cudnn", "SDPA cuDNN")]
by = {}
for r in rows:
    by[(r["impl"], int(r["N"]), int(r["d"]), int(r["causal"]))] = r
def val(r, k):
    try:
        x = float(r[k])
        return x if math.isfinite(x) else None
    except (KeyError, TypeError, ValueError):
        return None
def cell(r, t):
    if not r:
        return "—"
    if t == "fb":  # forward + backward: both medians added, both FLOP counts added
        mf, mb, tf, tb = val(r, "fwd_ms"), val(r, "bwd_ms"), val(r, "fwd_tflops"), val(r, "bwd_tflops")
        if None in (mf, mb, tf, tb):
            return "—"
        ms, tfl = mf + mb, (tf * mf + tb * mb) / (mf + mb)
    else:
        ms, tfl = val(r, t + "_ms"), val(r, t + "_tflops")
        if ms is None or tfl is None:
            return "—"
    return f"{ms:.2f} ({tfl:.0f}, {tfl / peak:.2f})"
print(f"ms (TFLOP/s, fraction of the dense bf16 peak of {peak:.1f} TFLOP/s: NVIDIA's H100/H200 SXM datasheet figure, "
      "989.4 at 132 SMs, scaled by this device's SM count). Forward FLOPs 4·B·H·N²·d, halved when causal; backward 2.5× "
      "that; forward + backward = the two medians added. flashgrad: bf16 operands, float32 accumulation, float32 o and "
      "gradients; SDPA: bf16 in and out.")
print()
hdr = ["N", "d", "causal", "B×H"] + [f"{n} {t}" for t, tn in (("fwd", ""), ("bwd", ""), ("fb", "")) for _, n in impls]
hdr = [h.replace(" fb", " fwd+bwd") for h in hdr]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
keys = sorted({k[1:] for k in by})
for N, d, c in keys:
    r0 = next(by[(i, N, d, c)] for i, _ in impls if (i, N, d, c) in by)
    cells = [cell(by.get((i, N, d, c)), t) for t in ("fwd", "bwd", "fb") for i, _ in impls]
    print(f"| {N} | {d} | {c} | {r0['B']}×{r0['H']} | " + " | ".join(cells) + " |")
print(f"\n{sum(1 for k in by if k[0] == 'flash')} flashgrad bf16 rows, {sum(1 for k in by if k[0] != 'flash')} SDPA rows.")
EOF3
    section "5b. bf16 tensor cores: flashgrad (cuda/attention_bf16) vs PyTorch SDPA flash and cuDNN"
    cat "$SCRATCH/bench_bf16.md" >>"$BODY"
    note "benchmark bf16: flashgrad rc $rc_fgb, PyTorch flash/cuDNN rc $rc_thb [$(elapsed) s]"
    if [ -n "$NCU" ] && [ "$(left)" -gt 60 ]; then
        begin "ncu"
        make_npy "$SCRATCH/in_ncu" f4 1 4 4096 64 >>"$NCU_LOG" 2>&1
        run 90 "$NCU_LOG" "$NCU" --clock-control none --kernel-name regex:flash --launch-count 4 \
            --metrics sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_short_scoreboard,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_mio_throttle \
            build-cuda/flashgrad attention --device cuda --q "$SCRATCH/in_ncu/q.npy" --k "$SCRATCH/in_ncu/k.npy" \
            --v "$SCRATCH/in_ncu/v.npy" --do "$SCRATCH/in_ncu/do.npy" --out "$SCRATCH/ncu_out"
        grep -E 'flash|warps_active|bank_conflicts|wavefronts|inst_issued|pipe_fma|stalled' "$NCU_LOG" | head -40 >"$SCRATCH/ncu.txt" || true
        echo "ncu at N = 4096 (achieved occupancy, shared-memory bank conflicts, issue slots):" >>"$BODY"
        code "$SCRATCH/ncu.txt"
        note "ncu: rc $RC [$(elapsed) s]"
    else
        note "ncu: SKIPPED ($([ -z "$NCU" ] && echo 'ncu not found' || echo "only $(left) s left"))"
    fi
fi

[ $OK_BUILD -eq 1 ] && [ $OK_TESTS -eq 1 ]
