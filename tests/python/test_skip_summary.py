"""tests/skip_summary.sh: the block `make test` ends with names every group of skipped tests, how many,
and what enables it, from the lines the runners log (tests/skip_log.c, run_pytest.sh, conftest.py)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def summary(tmp_path, lines):
    log = tmp_path / "skips.txt"
    log.write_text("".join("\t".join(x) + "\n" for x in lines))
    r = subprocess.run(["sh", os.path.join(ROOT, "tests", "skip_summary.sh"), str(log), str(tmp_path / "absent")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def line_of(out, title):
    found = [x for x in out.splitlines() if x.startswith("  skipped: " + title + " (")]
    assert len(found) == 1, out
    return found[0]


def test_each_group_is_named_with_its_count_and_enabler(tmp_path):
    out = summary(tmp_path, [
        ("c", "attention/torch_cross_check", "x: skipped: torch is not importable by /usr/bin/python3"),
        ("c", "gpt/torch_logits", "y: skipped: torch is not importable by /usr/bin/python3"),
        ("py", "tests/python/test_torch*.py", "no torch for /usr/bin/python3"),
        ("c", "gpt2_files/hf_model_loads", "z: skipped: numpy/torch/transformers not importable"),
        ("c", "gpt2_files/hf_model_fine_tunes_with_init_from", "w: skipped: No module named 'transformers'"),
        ("c", "mpi/two_ranks", "mpi: mpirun is not installed"),
        ("py", "tests/python/test_torch_cuda.py::a", "Skipped: no CUDA device"),
        ("py", "tests/python/test_torch_cuda.py::b", "Skipped: no CUDA device"),
        ("c", "fileio/modes", "running as root: folder permissions are not enforced"),
        ("c", "odd/one", "a reason of its own"),
    ])
    t = line_of(out, "PyTorch cross-checks")
    assert "2 tests and every test in tests/python/test_torch*.py" in t and "FG_TORCH_PYTHON" in t
    assert "1 test)" in line_of(out, "transformers") and "transformers" in line_of(out, "transformers")
    assert "1 test)" in line_of(out, "GPT-2 fine-tune test")
    assert "openmpi-bin" in line_of(out, "MPI tests")
    assert "2 tests" in line_of(out, "CUDA tests")
    assert "non-root" in line_of(out, "permission tests") or "other than root" in line_of(out, "permission tests")
    assert "odd/one: a reason of its own" in out
    assert out.count("  skipped: ") == 7


def test_nothing_skipped_prints_nothing(tmp_path):
    assert summary(tmp_path, []) == ""
