#!/bin/sh
# lint_layers.sh — every file includes headers from its own folder or from lower layers only:
#
#     tensor/  <-  autograd/  <-  ops/  <-  { cuda/, datasets/ }  <-  train/  <-  { cli/, bench/ }
#
# (a folder's subfolders, such as train/mpi/, belong to it). Siblings do not include each other, and
# nothing but the benchmarks includes cuda/: the library reaches a device through its kernel table.
# ops/cpu/ is private to ops/: everything else (the Python shim too) reaches the CPU device through
# ops/cpu.h, and only ops/, cuda/ and the tests include the kernel tables (ops/kernels.h,
# ops/kernels_cpu.h, ops/attention_kernels.h). The CPU kernels live in ops/cpu/ and include nothing
# of autograd/ (nor ops/ops_internal.h, which does); no op shell (ops/*.c) defines an fg_cpu_ function.
# The CPU runtime (ops/cpu.h) is defined outside ops/cpu/, and outside ops/ nothing calls or declares
# a function of an ops/cpu/ file, declares an OpenBLAS function, or (but cuda/) includes
# ops/kernels_cpu.h. The tests are white-box and may include any header.
# Prints one line per offending include and exits 1; exits 0 when the tree is clean.
cd "$(dirname "$0")/.." || exit 2
# The folders each layer may include besides its own.
allowed() {
    case "$1" in
    tensor) echo "" ;;
    autograd) echo "tensor" ;;
    ops) echo "tensor autograd" ;;
    cuda | datasets) echo "tensor autograd ops" ;;
    train) echo "tensor autograd ops datasets" ;;
    cli) echo "tensor autograd ops datasets train" ;;
    bench) echo "tensor autograd ops datasets train cuda cli" ;;
    esac
}
layered=" tensor autograd ops cuda datasets train cli bench "
bad=0
for f in $(find tensor autograd ops cuda datasets train cli bench -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \) 2>/dev/null | sort); do
    top=${f%%/*}
    ok=" $top $(allowed "$top") "
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' "$f" | sort -u); do
        case "$layered" in *" $inc "*) ;; *) continue ;; esac # not a layered folder (tests/ helpers)
        case "$ok" in *" $inc "*) continue ;; esac
        line=$(grep -n "#[[:space:]]*include[[:space:]]*\"$inc/" "$f" | head -1 | cut -d: -f1)
        echo "layers: $f:$line includes $inc/, which $top/ may not (it may include: $(allowed "$top"))"
        bad=1
    done
done
for f in $(find tensor autograd cuda datasets train cli bench python -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \) 2>/dev/null | sort); do
    line=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"ops/cpu/' "$f" | head -1 | cut -d: -f1)
    [ -z "$line" ] && continue
    echo "layers: $f:$line includes ops/cpu/, which is private to ops/ (include ops/cpu.h)"
    bad=1
done
# The kernel tables and the attention family's raw kernels are for ops/, the devices' code (cuda/)
# and the tests: train/, datasets/, cli/ and bench/ call ops through their public headers.
for f in $(find datasets train cli bench -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \) 2>/dev/null | sort); do
    line=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"ops/\(kernels\|kernels_cpu\|attention_kernels\)\.h"' "$f" |
        head -1 | cut -d: -f1)
    [ -z "$line" ] && continue
    echo "layers: $f:$line includes a kernel table header, which is private to ops/, cuda/ and the tests (use ops/ops.h, ops/flat.h, ops/infer.h, ops/device.h)"
    bad=1
done
# The CPU is a device like cuda/: its kernels (ops/cpu/) see raw pointers and sizes, never autograd,
# and an op's shell (ops/<family>.c) holds no kernel: every fg_cpu_ function is defined under ops/cpu/.
for f in $(find ops/cpu -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort); do
    # (ops/ops_internal.h is the shells' helpers, autograd's included: kernels use ops/cpu/kernel.h)
    line=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(autograd/\|ops/ops_internal\.h"\)' "$f" |
        head -1 | cut -d: -f1)
    [ -z "$line" ] && continue
    echo "layers: $f:$line includes autograd/ (or ops/ops_internal.h), but the CPU kernels know nothing of autograd (the op's shell in ops/ does)"
    bad=1
done
for f in $(find ops -maxdepth 1 -type f -name '*.c' 2>/dev/null | sort); do
    # a definition (or declaration) starts at column 0: "fg_status fg_cpu_softmax_forward(..."
    line=$(grep -n '^[A-Za-z_].*[^A-Za-z0-9_]fg_\{1,2\}cpu_[A-Za-z0-9_]*[[:space:]]*(' "$f" | head -1 | cut -d: -f1)
    [ -z "$line" ] && continue
    echo "layers: $f:$line defines a CPU kernel in an op's shell (kernels go in ops/cpu/, declared in ops/kernels_cpu.h or ops/cpu/<family>.h)"
    bad=1
done
# The CPU runtime (ops/cpu.h: threads, SIMD level, peak, BLAS's threads, oneDNN, the flash profile)
# is defined outside ops/cpu/ (ops/cpu_*.c), which holds kernels only: outside ops/ (the tests
# aside, which are white-box), no file calls or declares a function defined in ops/cpu/*.c, none
# declares an OpenBLAS function of its own (fg_blas_* are the runtime's), and none but cuda/
# includes ops/kernels_cpu.h: ops/cpu.h is the one header about the CPU they include.
cpu_names=$(for f in ops/cpu/*.c; do
    # a definition starts at column 0 with its return type: "fg_status fg_cpu_softmax_forward(..."
    sed -n 's/^[A-Za-z_][^;]*[^A-Za-z0-9_]\(fg_[A-Za-z0-9_]*\)[[:space:]]*(.*/\1/p' "$f"
done | sort -u | paste -sd'|' -)
for f in $(find tensor autograd cuda datasets train cli bench python -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.py' \) 2>/dev/null | sort); do
    # code lines only: a comment's line ("/* ...", " * ...", "// ...", "# ...") may name a kernel
    hit=$(grep -nE "(^|[^A-Za-z0-9_])($cpu_names)[[:space:]]*\(" "$f" |
        grep -vE '^[0-9]+:[[:space:]]*(/\*|\*|//|#)' | head -1)
    if [ -n "$cpu_names" ] && [ -n "$hit" ]; then
        name=$(echo "$hit" | grep -oE "(^|[^A-Za-z0-9_])($cpu_names)[[:space:]]*\(" | head -1 | tr -d '( \t' | sed 's/^[^f]*//')
        echo "layers: $f:${hit%%:*} calls or declares $name, a function of an ops/cpu/ kernel file (outside ops/, the CPU is ops/cpu.h's runtime)"
        bad=1
    fi
    line=$(grep -nE '^[[:space:]]*extern[^;(]*[^A-Za-z0-9_]openblas_[A-Za-z0-9_]*[[:space:]]*\(' "$f" | head -1 | cut -d: -f1)
    if [ -n "$line" ]; then
        echo "layers: $f:$line declares an OpenBLAS function (use ops/cpu.h: fg_blas_set_threads, fg_blas_threads, fg_blas_core_name)"
        bad=1
    fi
    case "$f" in cuda/*) continue ;; esac
    line=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"ops/kernels_cpu\.h"' "$f" | head -1 | cut -d: -f1)
    if [ -n "$line" ]; then
        echo "layers: $f:$line includes ops/kernels_cpu.h, the CPU's kernels (outside ops/ and cuda/, include ops/cpu.h)"
        bad=1
    fi
done
[ "$bad" -eq 0 ] && echo "layers: every include points down (tensor <- autograd <- ops <- cuda, datasets <- train <- cli, bench; ops/cpu/ and the kernel tables private to ops/; the CPU kernels in ops/cpu/, free of autograd; outside ops/, the CPU through ops/cpu.h only)"
exit "$bad"
