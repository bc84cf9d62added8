"""reference.py — attention written out in numpy (float64), forward and backward, independent of flashgrad.

The semantics are ops/attention.h's, step by step:
  s1 = scale q_i . k_j (K/V head h // (H / H_kv)); softcap c: s = c tanh(s1 / c); ALiBi: s -= slope_h |i' - j|
  with i' = i + Nk - Nq; score_mod: s = f(s, b, h, i, j); visible: causal j <= i', window
  i' - L <= j <= i' + R (negative: unbounded), mask(b, h, i, j); P = softmax over the visible j (rows
  that see nothing: P = 0, lse = -inf); dropout keeps (b, h, i, j) iff Philox4x32-10 says so
  (tensor/philox.h, reimplemented below) and scales by 1/(1 - p); O = (P Z) V.
Backward: dV = (P Z)^T dO; dP = (dO V^T) Z; dS = P (dP - rowsum(dP P)); dS1 = dS G (G = ds/ds1);
dQ = scale dS1 K; dK = scale dS1^T Q; K/V gradients summed over each group of query heads.
"""
import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorized Philox4x32-10 on uint64 arrays holding 32-bit words; returns the 4 output words."""
    c = [np.asarray(x).astype(np.uint64) & np.uint64(MASK32) for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0 & MASK32), np.uint64(k1 & MASK32)
    for r in range(10):
        p0 = np.uint64(M0) * c[0]
        p1 = np.uint64(M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(MASK32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(MASK32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        if r < 9:
            k0 = np.uint64((int(k0) + W0) & MASK32)
            k1 = np.uint64((int(k1) + W1) & MASK32)
    return c


def dropout_threshold(p):
    t = p * 4294967296.0
    return 0xFFFFFFFF if t >= 4294967295.0 else int(t)


def keep_mask(seed, p, B, H, Nq, Nk):
    """fg_attn_keep for every (b, h, i, j): a bool array (B, H, Nq, Nk)."""
    thr = dropout_threshold(p)
    if thr == 0:
        return np.ones((B, H, Nq, Nk), bool)
    b, h, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(Nq), np.arange(Nk), indexing="ij")
    out = philox4x32_10(j >> 2, i, h, b, seed & MASK32, seed >> 32)
    word = np.choose(j & 3, out)
    return word >= np.uint64(thr)


def alibi_slope(h, H):
    n = 1
    while n * 2 <= H:
        n *= 2
    if h < n:
        return 2.0 ** (-8.0 * (h + 1) / n)
    return 2.0 ** (-4.0 * (2 * (h - n) + 1) / n)


def _scores(q, k, causal, scale, window, alibi, softcap, score_mod, score_mod_grad, mask):
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    K = np.repeat(k.astype(np.float64), H // Hkv if Hkv else 1, axis=1)
    scale = 1 / np.sqrt(d) if scale is None else scale
    S = scale * np.einsum("bhid,bhjd->bhij", q.astype(np.float64), K)
    G = np.ones_like(S)
    ip = np.arange(Nq)[:, None] + (Nk - Nq)
    j = np.arange(Nk)[None, :]
    if softcap:
        t = np.tanh(S / softcap)
        S = softcap * t
        G = G * (1 - t * t)
    if alibi is not None and alibi is not False:
        slopes = np.array([alibi_slope(h, H) for h in range(H)]) if alibi is True else np.asarray(alibi, np.float64)
        S = S - slopes[None, :, None, None] * np.abs(ip - j)[None, None]
    vis = np.ones((B, H, Nq, Nk), bool)
    if causal:
        vis &= (j <= ip)[None, None]
    if window is not None:
        L, R = (-1 if w is None else w for w in window)
        if L >= 0:
            vis &= (j >= ip - L)[None, None]
        if R >= 0:
            vis &= (j <= ip + R)[None, None]
    if mask is not None:
        for idx in np.ndindex(B, H, Nq, Nk):
            vis[idx] &= bool(mask(*idx))
    if score_mod is not None:
        S2 = S.copy()
        for idx in np.ndindex(B, H, Nq, Nk):
            if vis[idx]:
                S2[idx] = score_mod(S[idx], *idx)
                G[idx] *= score_mod_grad(S[idx], *idx)
        S = S2
    S = np.where(vis, S, -np.inf)
    return S, G, scale, K


def attention(q, k, v, causal=False, scale=None, dropout=0.0, seed=0, window=None, alibi=None, softcap=None,
              score_mod=None, score_mod_grad=None, mask=None):
    """(O, lse, P, Z): float64."""
    S, _, _, _ = _scores(q, k, causal, scale, window, alibi, softcap, score_mod, score_mod_grad, mask)
    B, H, Nq, Nk = S.shape
    Hkv = k.shape[1]
    V = np.repeat(v.astype(np.float64), H // Hkv if Hkv else 1, axis=1)
    m = S.max(-1, keepdims=True, initial=-np.inf)  # no key: -inf, as a row that sees none
    none = ~np.isfinite(m)
    m = np.where(none, 0, m)
    e = np.exp(S - m)
    l = e.sum(-1, keepdims=True)
    P = np.where(none, 0, e / np.where(l == 0, 1, l))
    with np.errstate(divide="ignore"):
        lse = np.where(none[..., 0], -np.inf, (m + np.log(np.where(l == 0, 1, l)))[..., 0])
    Z = keep_mask(seed, dropout, B, H, Nq, Nk) / (1 - dropout) if dropout else np.ones_like(P)
    O = np.einsum("bhij,bhjd->bhid", P * Z, V)
    return O, lse, P, Z


def attention_backward(q, k, v, do, causal=False, scale=None, dropout=0.0, seed=0, window=None, alibi=None,
                       softcap=None, score_mod=None, score_mod_grad=None, mask=None):
    """(dq, dk, dv): float64."""
    S, G, sc, K = _scores(q, k, causal, scale, window, alibi, softcap, score_mod, score_mod_grad, mask)
    _, _, P, Z = attention(q, k, v, causal, scale, dropout, seed, window, alibi, softcap, score_mod, score_mod_grad,
                           mask)
    B, H, Nq, d = q.shape
    Hkv = k.shape[1]
    grp = H // Hkv if Hkv else 1
    V = np.repeat(v.astype(np.float64), grp, axis=1)
    do = do.astype(np.float64)
    dV = np.einsum("bhij,bhid->bhjd", P * Z, do)
    dP = np.einsum("bhid,bhjd->bhij", do, V) * Z
    dS = P * (dP - (dP * P).sum(-1, keepdims=True))
    dS1 = np.where(P > 0, dS * G, 0)
    dq = sc * np.einsum("bhij,bhjd->bhid", dS1, K)
    dK = sc * np.einsum("bhij,bhid->bhjd", dS1, q.astype(np.float64))
    Nk = k.shape[2]
    dk = dK.reshape(B, Hkv, grp, Nk, d).sum(2)
    dv = dV.reshape(B, Hkv, grp, Nk, d).sum(2)
    return dq, dk, dv
