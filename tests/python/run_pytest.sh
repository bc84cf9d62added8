#!/bin/sh
# run_pytest.sh [PYTEST ARGS] — the Python package's tests (tests/python/), as `make python-test`
# and `make test` run them. The environment names the library (FLASHGRAD_LIB) and the CLI (FG_BIN).
#
#   FG_PYTHON        the interpreter for the numpy tests (default /usr/bin/python3). Without numpy
#                    or pytest, Debian's python3-numpy and python3-pytest are installed when root;
#                    otherwise the tests are skipped with one line (exit 0).
#   FG_TORCH_PYTHON  an interpreter with torch, numpy and pytest for the torch tests
#                    (tests/python/test_torch.py); unset: FG_PYTHON, when it has torch; else they
#                    are skipped with one line. They need torch >= 2.1 (scaled_dot_product_attention,
#                    torch.func); an older torch (Debian bookworm's python3-torch is 1.13) skips them
#                    with one line too, and the numpy tests run as usual.
#   FG_SKIP_LOG      a file that gets one line per skipped test or group of tests (make test and
#                    make python-test set it; tests/skip_summary.sh prints them grouped at the end).
cd "$(dirname "$0")/../.." || exit 2
py=${FG_PYTHON:-/usr/bin/python3}
tpy=${FG_TORCH_PYTHON:-}
has() { "$1" -c "import $2" >/dev/null 2>&1; }
# A group of tests left out, for the summary `make test` ends with (tests/skip_summary.sh):
# skip_log FILES REASON appends one line to $FG_SKIP_LOG when it is set.
skip_log() { [ -z "${FG_SKIP_LOG:-}" ] || printf 'py\t%s\t%s\n' "$1" "$2" >> "$FG_SKIP_LOG"; }

if ! has "$py" "numpy, pytest" && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    sh tests/deps.sh python3-numpy python3-pytest || true
fi
py_ok=0
has "$py" "numpy, pytest" && py_ok=1
if [ -n "$tpy" ] && ! has "$tpy" "torch, numpy, pytest"; then
    echo "python tests: FG_TORCH_PYTHON=$tpy cannot import torch, numpy and pytest" >&2
    exit 1
fi
[ -z "$tpy" ] && [ "$py_ok" = 1 ] && has "$py" torch && tpy=$py
# The torch tests need torch >= 2.1; an older one is reported once and its tests are left out.
TORCH_MIN=2.1
old_torch=""
if [ -n "$tpy" ] && ! "$tpy" -c "
import sys, re, torch
v = tuple(int(x) for x in re.findall(r'\d+', torch.__version__)[:2])
sys.exit(0 if v >= (2, 1) else 1)" >/dev/null 2>&1; then
    old_torch=$("$tpy" -c "import torch; print(torch.__version__)" 2>/dev/null)
    if [ "$tpy" = "$py" ] || [ "$py_ok" = 1 ]; then
        echo "python tests: torch tests skipped (torch $old_torch at $tpy is older than $TORCH_MIN, which they need; set FG_TORCH_PYTHON to a newer one)"
        skip_log "tests/python/test_torch*.py" "torch $old_torch at $tpy is older than $TORCH_MIN"
        tpy=""
        skip_torch_line=1
    else
        echo "python tests: skipped (torch $old_torch at $tpy is older than $TORCH_MIN, and $py lacks numpy or pytest)"
        skip_log "tests/python/*.py" "numpy or pytest missing for $py"
        exit 0
    fi
fi

export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

if [ "$py_ok" = 0 ] && [ -z "$tpy" ]; then
    echo "python tests: skipped ($py lacks numpy or pytest; install python3-numpy python3-pytest)"
    skip_log "tests/python/*.py" "numpy or pytest missing for $py"
    exit 0
fi
if [ -z "$tpy" ]; then
    if [ -z "${skip_torch_line:-}" ]; then
        echo "python tests: torch tests skipped (no torch for $py; set FG_TORCH_PYTHON=/path/to/python with torch)"
        skip_log "tests/python/test_torch*.py" "no torch for $py"
    fi
    FG_TORCH=0 "$py" -m pytest -q -p no:cacheprovider tests/python --ignore-glob='tests/python/test_torch*.py' "$@"
elif [ "$py_ok" = 0 ] || [ "$tpy" = "$py" ]; then
    [ "$py_ok" = 0 ] && echo "python tests: $py lacks numpy or pytest; all tests with $tpy"
    FG_TORCH=1 "$tpy" -m pytest -q -p no:cacheprovider tests/python "$@"
else
    FG_TORCH=0 "$py" -m pytest -q -p no:cacheprovider tests/python --ignore-glob='tests/python/test_torch*.py' "$@" || exit 1
    FG_TORCH=1 "$tpy" -m pytest -q -p no:cacheprovider tests/python/test_torch*.py "$@"
fi
