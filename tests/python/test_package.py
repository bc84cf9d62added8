"""The package itself: where it finds the library, what importing it does, and that arrays are not copied."""
import os
import subprocess
import sys

import numpy as np

import flashgrad
from flashgrad import _attention


def _python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e)


def test_flashgrad_lib_names_the_library():
    r = _python("import flashgrad; print(flashgrad.lib_path)", FLASHGRAD_LIB=flashgrad.lib_path)
    assert r.returncode == 0 and r.stdout.strip() == flashgrad.lib_path


def test_a_flashgrad_lib_that_cannot_be_loaded_is_one_import_error(tmp_path):
    bad = tmp_path / "libflashgrad.so"
    bad.write_text("not a library")
    for path in (str(bad), str(tmp_path / "missing.so")):
        r = _python("import flashgrad", FLASHGRAD_LIB=path)
        assert r.returncode == 1
        assert r.stderr.strip().splitlines()[-1].startswith("ImportError: flashgrad: cannot load FLASHGRAD_LIB=" + path)


def test_a_library_without_the_python_interface_is_refused():
    libc = "libc.so.6"
    r = _python("import flashgrad", FLASHGRAD_LIB=libc)
    assert r.returncode == 1 and "has no fgpy_abi_version" in r.stderr


def test_importing_flashgrad_does_not_import_torch():
    """Not for the CPU library. A library built with CUDA imports torch first when torch is
    installed (python/flashgrad/_lib.py: their CUDA libraries share sonames)."""
    r = _python("import sys, flashgrad, flashgrad._lib as L; print('torch' in sys.modules, "
                "bool(L.lib.fgpy_cuda_built()))")
    assert r.returncode == 0, r.stderr
    imported, cuda = r.stdout.split()
    assert imported == "False" or cuda == "True", r.stdout


def test_c_contiguous_inputs_reach_the_kernels_without_a_copy(rng):
    q = rng.standard_normal((1, 2, 3, 4))
    assert _attention._array(q, "q") is q
    f = q.astype(np.float32)
    assert _attention._array(f, "q") is f
    t = q.transpose(0, 1, 3, 2)
    c = _attention._array(t, "q")
    assert c is not t and c.flags.c_contiguous and np.array_equal(c, t)


def test_the_docstring_example_runs(rng):
    q, k, v = (rng.standard_normal((2, 4, 16, 8)) for _ in range(3))
    do = rng.standard_normal((2, 4, 16, 8))
    o, lse = flashgrad.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = flashgrad.attention_backward(q, k, v, o, lse, do, causal=True)
    rep = flashgrad.gradcheck_attention(shape=(2, 4, 16, 16, 8), softcap=5.0)
    assert rep.passed and "PASS" in str(rep) and dq.shape == q.shape
