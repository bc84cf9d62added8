"""Shared fixtures of the Python package's tests (run by `make test` / `make python-test`).

The tests marked `torch` (test_torch.py) need PyTorch: they are skipped when it cannot be imported,
unless FG_TORCH=1 says it must be there (then its absence fails them). The CLI agreement tests find
the program at $FG_BIN (default build/flashgrad of this checkout).
"""
import faulthandler
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)  # reference.py
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs PyTorch (flashgrad.torch); tests/python/test_torch.py")


@pytest.fixture(autouse=True)
def _no_test_hangs():
    """A test that hangs (a deadlock between flashgrad's threads and Python's, say) ends the run with
    every thread's traceback instead of blocking `make test` forever."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def fg_bin():
    p = os.environ.get("FG_BIN") or os.path.join(ROOT, "build", "flashgrad")
    if not os.access(p, os.X_OK):
        pytest.skip("the flashgrad CLI is not built (%s)" % p)
    return p


# ---- skips, for the summary `make test` ends with (tests/skip_summary.sh) -------------------------

def _log_skip(name, report):
    path = os.environ.get("FG_SKIP_LOG")
    if not path or not report.skipped or hasattr(report, "wasxfail"):
        return
    r = report.longrepr
    why = r[2] if isinstance(r, tuple) and len(r) == 3 else str(r)
    with open(path, "a") as f:
        f.write("py\t%s\t%s\n" % (name, " ".join(str(why).split())))


def pytest_runtest_logreport(report):
    _log_skip(report.nodeid, report)


def pytest_collectreport(report):
    _log_skip(report.nodeid or "tests/python", report)

