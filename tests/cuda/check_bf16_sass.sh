#!/usr/bin/env bash
# check_bf16_sass.sh OBJECT — what the compiler made of the bf16 tensor-core attention kernels
# (cuda/attention_bf16.cuh), read from the compiled object (build-cuda/cuda/attention_bf16.o) with
# cuobjdump; `make cuda` runs it after the build, bench/gpu_check.sh puts its table in the report.
#
# Per kernel (fa16_fwd_kernel, fa16_bwd_dkdv_kernel, fa16_bwd_dq_kernel at each width, and the
# row-dot kernel 1): registers, stack frame and local memory as ptxas recorded them (cuobjdump
# -res-usage: STACK is ptxas -v's "bytes stack frame", where spills would go), and SASS instruction
# counts (cuobjdump -sass): HMMA (mma.sync), LDSM (ldmatrix), LDGSTS (cp.async), LDL/STL (local
# memory loads and stores). Fails (exit 1) when a tensor-core kernel has no HMMA, no LDSM or no
# LDGSTS, or when any kernel has a stack frame, local memory or an LDL/STL; when fewer than the
# six tensor-core instances are found; or when the object is missing.
#
# cuobjdump: $CUOBJDUMP, else on PATH, else beside nvcc, else the one Triton's Python package
# carries (in $FG_TORCH_PYTHON's, ../torch2/bin/python's — the Makefile's PyTorch 2 venv — or
# python3's). Without one the check cannot run: it says so and exits 0, or 1 with
# FG_SASS_REQUIRED=1 (bench/gpu_check.sh sets that).
set -u -o pipefail
obj="${1:-build-cuda/cuda/attention_bf16.o}"
req="${FG_SASS_REQUIRED:-0}"
if [ ! -f "$obj" ]; then
    echo "check_bf16_sass: $obj not found (build it with make cuda)" >&2
    exit 1
fi
find_cuobjdump() {
    [ -n "${CUOBJDUMP:-}" ] && [ -x "$CUOBJDUMP" ] && { echo "$CUOBJDUMP"; return; }
    command -v cuobjdump 2>/dev/null && return
    local nv
    nv="$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)"
    [ -x "$(dirname "$nv")/cuobjdump" ] && { echo "$(dirname "$nv")/cuobjdump"; return; }
    local py dir
    for py in ${FG_TORCH_PYTHON:-} "$(dirname "$0")/../../../torch2/bin/python" python3; do
        dir="$("$py" -c 'import importlib.util, os; s = importlib.util.find_spec("triton"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)"
        [ -n "$dir" ] && [ -x "$dir/backends/nvidia/bin/cuobjdump" ] && { echo "$dir/backends/nvidia/bin/cuobjdump"; return; }
    done
}
cuobjdump="$(find_cuobjdump)"
if [ -z "$cuobjdump" ]; then
    echo "check_bf16_sass: cuobjdump not found (set CUOBJDUMP=...): the bf16 kernels' SASS was NOT checked" >&2
    [ "$req" = 1 ] && exit 1
    exit 0
fi
filt="$(command -v cu++filt || command -v c++filt || echo cat)"
res="$("$cuobjdump" -res-usage "$obj" 2>&1)" || { echo "check_bf16_sass: $cuobjdump -res-usage $obj failed: $res" >&2; exit 1; }
sass="$("$cuobjdump" -sass "$obj" 2>&1)" || { echo "check_bf16_sass: $cuobjdump -sass $obj failed" >&2; exit 1; }
# one line per function: mangled name, REG, STACK, LOCAL
usage="$(awk '/^ Function / { f = $2; sub(/:$/, "", f); next }
              f && /REG:/ { r = s = l = "?"; for (i = 1; i <= NF; i++) { split($i, kv, ":"); if (kv[1] == "REG") r = kv[2]; if (kv[1] == "STACK") s = kv[2]; if (kv[1] == "LOCAL") l = kv[2] }
                            print f, r, s, l; f = "" }' <<<"$res")"
# one line per function: mangled name, HMMA, LDSM, LDGSTS, LDL, STL
counts="$(awk '/Function :/ { if (f) print f, h, m, a, ll, sl; f = $3; h = m = a = ll = sl = 0; next }
               / HMMA/ { h++ } / LDSM/ { m++ } / LDGSTS/ { a++ } / LDL/ { ll++ } / STL/ { sl++ }
               END { if (f) print f, h, m, a, ll, sl }' <<<"$sass")"
echo "check_bf16_sass: $obj (SASS by $cuobjdump)"
printf '%-36s %5s %6s %6s %5s %5s %7s %4s %4s %s\n' kernel REG STACK LOCAL HMMA LDSM LDGSTS LDL STL verdict
bad=0
tc=0
while read -r f r s l; do
    [ -z "$f" ] && continue
    read -r h m a ll sl <<<"$(awk -v f="$f" '$1 == f { print $2, $3, $4, $5, $6 }' <<<"$counts")"
    name="$(echo "$f" | $filt | sed -e "s/^void //" -e "s/(.*)$//")"
    why=""
    case "$f" in
        *fa16_fwd_kernel* | *fa16_bwd_dkdv_kernel* | *fa16_bwd_dq_kernel*)
            tc=$((tc + 1))
            [ "${h:-0}" -gt 0 ] || why="$why no HMMA;"
            [ "${m:-0}" -gt 0 ] || why="$why no LDSM;"
            [ "${a:-0}" -gt 0 ] || why="$why no LDGSTS (cp.async);"
            ;;
    esac
    [ "$s" = 0 ] || why="$why stack frame $s bytes;"
    [ "$l" = 0 ] || why="$why local memory $l bytes;"
    [ "${ll:-0}" -eq 0 ] && [ "${sl:-0}" -eq 0 ] || why="$why local loads/stores;"
    printf '%-36s %5s %6s %6s %5s %5s %7s %4s %4s %s\n' "$name" "$r" "$s" "$l" "${h:-?}" "${m:-?}" "${a:-?}" "${ll:-?}" "${sl:-?}" \
        "${why:- ok}"
    [ -n "$why" ] && bad=1
done <<<"$usage"
if [ "$tc" -lt 6 ]; then
    echo "check_bf16_sass: FAIL — $tc tensor-core kernel instances in $obj, expected 6 (forward, dK/dV, dQ at D = 64 and 128)"
    exit 1
fi
if [ $bad -ne 0 ]; then
    echo "check_bf16_sass: FAIL — see the verdicts above"
    exit 1
fi
echo "check_bf16_sass: ok — every tensor-core kernel has HMMA, LDSM and LDGSTS; no kernel has a stack frame, local memory or LDL/STL"
