"""Calls from several Python threads at once, the GIL released while flashgrad computes, and no leaks."""
import threading
import time

import numpy as np
import pytest

import flashgrad


def _case(seed, dtype):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 4, 33, 16)).astype(dtype)
    k = rng.standard_normal((2, 2, 40, 16)).astype(dtype)
    v = rng.standard_normal((2, 2, 40, 16)).astype(dtype)
    do = rng.standard_normal((2, 4, 33, 16)).astype(dtype)
    return q, k, v, do


OPTS = [
    {"causal": True},
    {"dropout": 0.2, "seed": 3, "block_q": 7, "block_k": 5},
    {"window": (5, 2), "alibi": True, "impl": "naive"},
    {"softcap": 3.0, "causal": True},
    {"mask": lambda b, h, i, j: (i * 7 + j) % 5 != 0, "causal": True},
    {"score_mod": lambda s, b, h, i, j: s - 0.01 * abs(i - j), "score_mod_grad": lambda s, b, h, i, j: 1.0},
]


def _run(seed, dtype, opts):
    q, k, v, do = _case(seed, dtype)
    o, lse = flashgrad.attention(q, k, v, return_lse=True, **opts)
    return (o, lse) + flashgrad.attention_backward(q, k, v, o, lse, do, **opts)


def test_concurrent_calls_give_the_serial_results_bit_for_bit():
    jobs = [(s, dt, i) for s in range(2) for dt in (np.float32, np.float64) for i in range(len(OPTS))]
    want = {j: _run(j[0], j[1], OPTS[j[2]]) for j in jobs}
    got, errors = {}, []

    def worker(my_jobs):
        try:
            for _ in range(2):
                for j in my_jobs:
                    got.setdefault(j, []).append(_run(j[0], j[1], OPTS[j[2]]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(jobs[t::6] + jobs[:3],)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for j, results in got.items():
        for r in results:
            for a, b in zip(r, want[j]):
                assert np.array_equal(a, b, equal_nan=True), j


def test_a_callback_exception_stays_in_its_own_thread():
    q, k, v, _ = _case(0, np.float64)
    want = flashgrad.attention(q, k, v, mask=lambda b, h, i, j: j <= i + 7)
    out = {}

    def bad():
        def mk(b, h, i, j):
            if i == 20:
                raise LookupError("thread-local failure")
            return True
        try:
            flashgrad.attention(q, k, v, mask=mk)
        except LookupError as e:
            out["bad"] = e

    def good():
        out["good"] = [flashgrad.attention(q, k, v, mask=lambda b, h, i, j: j <= i + 7) for _ in range(3)]

    ts = [threading.Thread(target=bad), threading.Thread(target=good), threading.Thread(target=bad)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert isinstance(out["bad"], LookupError)
    assert all(np.array_equal(g, want) for g in out["good"])


def test_callbacks_run_on_the_pools_worker_threads_without_deadlock():
    # every tile is partial under this mask, so the flash kernel calls it inside the pool's items, on
    # whichever of its threads runs them; each callback takes the GIL, which the caller has released
    q, k, v, do = _case(3, np.float64)
    flashgrad.set_threads(2)
    seen = set()

    def mk(b, h, i, j):
        seen.add(threading.get_ident())
        return (i + j) % 3 != 0

    try:
        want = None
        for _ in range(3):
            o, lse = flashgrad.attention(q, k, v, mask=mk, block_q=4, block_k=4, return_lse=True)
            g = flashgrad.attention_backward(q, k, v, o, lse, do, mask=mk, block_q=4, block_k=4)
            got = (o,) + g
            want = want or got
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    finally:
        flashgrad.set_threads(0)
    assert threading.get_ident() in seen  # the calling thread (worker 0) took part; others may have


def test_the_gil_is_released_while_flashgrad_computes():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 4, 1024, 64)).astype(np.float32)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.0005)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        time.sleep(0.01)
        spans = []
        for _ in range(3):
            t0 = time.monotonic()
            flashgrad.attention(q, q, q, impl="naive")  # one long C call, no callbacks
            spans.append((t0, time.monotonic()))
    finally:
        stop.set()
        t.join()
    # while the GIL is held through a call, the ticker cannot run: at most a tick or two at its edges
    inside = max(sum(1 for x in ticks if a < x < b) for a, b in spans)
    longest = max(b - a for a, b in spans)
    assert inside >= 5, "ticker ran %d times during a %.3f s call" % (inside, longest)


def _rss_kib():
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import resource
    return pages * resource.getpagesize() // 1024


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc")
def test_ten_thousand_calls_keep_rss_flat():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 8, 4)).astype(np.float32)
    do = np.ones_like(q)

    def calls(n):
        for i in range(n):
            o, lse = flashgrad.attention(q, q, q, causal=True, dropout=0.1, seed=i, return_lse=True)
            flashgrad.attention_backward(q, q, q, o, lse, do, causal=True, dropout=0.1, seed=i)
            if i % 10 == 0:  # error paths and callbacks too
                try:
                    flashgrad.attention(q, q, q, softcap=1e39)
                except ValueError:
                    pass
                flashgrad.attention(q, q, q, mask=lambda b, h, i, j: i >= j)

    calls(500)
    before = _rss_kib()
    calls(5000)  # 10,000 calls: a forward and a backward each, and 500 of each extra kind
    grown = _rss_kib() - before
    assert grown < 2048, "RSS grew by %d KiB over 10,000 calls" % grown
