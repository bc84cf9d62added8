#!/bin/sh
# run.sh — the field's float32 GEMM libraries side by side on a GPT step's products
# (bench/gemm_libs/compare.c says which and how). Fetches what it can into build/gemm-libs: Intel MKL
# (PyPI's mkl) and a newer OpenBLAS (PyPI's scipy-openblas32), by `pip download` with $PYTHON
# (default python3), and Debian's libxsmm-dev (installed when root); a library it cannot get is left
# out with one line. Builds flashgrad first (make). Arguments go to compare.c (--threads T,
# --repeat R, --model L4|L6|gpt2). Not part of any make target.
cd "$(dirname "$0")/../.." || exit 1
make --no-print-directory >/dev/null || exit 1
PY=${PYTHON:-python3}
W=build/gemm-libs
mkdir -p "$W"
fetch() { # fetch WHEEL-NAME DIR: download and unpack a wheel once
    [ -d "$W/$2" ] && return 0
    "$PY" -m pip download -q --no-deps -d "$W/wheels" "$1" >/dev/null 2>&1 || return 1
    whl=$(ls "$W"/wheels/"$(echo "$1" | tr - _)"-*.whl 2>/dev/null | head -1)
    [ -n "$whl" ] && mkdir -p "$W/$2" && (cd "$W/$2" && "$PY" -m zipfile -e "../../../$whl" .) >/dev/null 2>&1
}
ARGS=""
if fetch scipy-openblas32 scipy-openblas; then
    ARGS="$ARGS --scipy-openblas $(ls "$W"/scipy-openblas/scipy_openblas32/lib/libscipy_openblas*.so | head -1)"
else echo "gemm_libs: no scipy-openblas32 wheel (pip download failed): that OpenBLAS left out"; fi
if fetch mkl mkl; then
    MKL_LIB=$(dirname "$(ls "$W"/mkl/mkl-*.data/data/lib/libmkl_rt.so.* | head -1)")
    ARGS="$ARGS --mkl $(ls "$MKL_LIB"/libmkl_rt.so.* | head -1)"
    export LD_LIBRARY_PATH="$MKL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MKL_THREADING_LAYER=GNU
else echo "gemm_libs: no mkl wheel (pip download failed): MKL left out"; fi
XSMM=""
if [ -f /usr/lib/libxsmm.a ] || sh tests/deps.sh libxsmm-dev >/dev/null 2>&1; then
    XSMM="-DHAVE_XSMM -Wl,--start-group /usr/lib/libxsmmext.a /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a -Wl,--end-group"
else echo "gemm_libs: no libxsmm-dev: libxsmm left out"; fi
DNNL=""
[ -f /usr/include/dnnl.h ] && DNNL="-DFG_HAVE_DNNL"
BLAS_INC=$(pkg-config --cflags openblas 2>/dev/null)
# shellcheck disable=SC2086
cc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -I. $BLAS_INC $DNNL -o build/gemm_libs_compare bench/gemm_libs/compare.c \
    build/libflashgrad.a $XSMM $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) \
    ${DNNL:+-ldnnl} -ldl -lm -pthread || exit 1
grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/^model name\s*:/gemm_libs: cpu:/'
# one process per library (their thread teams spin after their calls); the columns joined by row
T=$(mktemp -d) || exit 1
n=0
for lib in fg-auto fg-tile onednn openblas openblas-wheel mkl libxsmm; do
    # shellcheck disable=SC2086
    build/gemm_libs_compare $ARGS --lib $lib "$@" > "$T/$n" 2>/dev/null && n=$((n + 1))
done
[ $n -gt 0 ] || { echo "gemm_libs: no library ran" >&2; rm -rf "$T"; exit 1; }
sed -n 1p "$T/0"
i=0
while [ $i -lt $n ]; do tail -1 "$T/$i" | sed "s/^/  $(sed -n 2p "$T/$i" | sed 's/.*| //'): /"; i=$((i + 1)); done
# the table: the first file's row labels and each file's column of figures, side by side
awk -F'|' 'FNR == 1 { f++ } FNR > 1 { line[FNR] = (f == 1 ? $1 : line[FNR]) "|" $2; last = FNR }
    END { for (r = 2; r < last; r++) print line[r] }' $(i=0; while [ $i -lt $n ]; do echo "$T/$i"; i=$((i + 1)); done)
rm -rf "$T"
