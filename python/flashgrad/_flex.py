"""_flex.py — torch.nn.attention.flex_attention's API on CPU tensors, forward and backward
(flashgrad.torch.flex_attention).

Legend: B batch, Hq query heads, Hkv K/V heads (G = Hq / Hkv), L queries, S keys, E q/k head dim,
Ev v head dim. q (B, Hq, L, E); k (B, Hkv, S, E); v (B, Hkv, S, Ev); out (B, Hq, L, Ev); lse (B, Hq, L).

  out = softmax(where(visible, score_mod(scale q k^T, b, h, i, j), -inf)) v

visible(b, h, i, j) comes from the BlockMask: a tile of (Q_BLOCK x KV_BLOCK) elements is empty
(listed nowhere: never visible), full (listed in full_kv_*: visible, its mask_mod never called) or
partial (listed in kv_*: visible where mask_mod says so). Two ways to compute it:

  * no score_mod (and Ev == E): the mask as a bool tensor — full tiles True, empty tiles False,
    mask_mod evaluated once on all partial tiles together — goes to flashgrad's C flash kernels,
    which summarize it per tile again and skip the empty ones (python/flashgrad/_torch_ops.py,
    flashgrad::attn_fwd); the C backward gives dq, dk, dv.
  * a score_mod: query-block rows in torch. For query block r, the key blocks visible to any (b, h)
    are gathered, the scores of the row computed with one matmul, score_mod called once on that
    row of tiles with broadcasting index tensors b (B,1,1,1), h (1,Hq,1,1), q_idx (1,1,Lr,1),
    kv_idx (1,1,1,Sr) — vectorised, never per element — and mask_mod once on its partial tiles.
    Saved for the backward: out and lse only. The backward recomputes each row's scores and
    differentiates score_mod with torch's autograd on that row: d(score_mod)/d(score) and, through
    the same call, the gradients of the tensors score_mod captures that require grad (a learned
    bias table, ALiBi slopes), which flex_attention returns to autograd like q, k and v.

The captured tensors are found in score_mod's closure, defaults and referenced globals (functions,
functools.partial objects, bound methods and nn.Modules are looked into, and lists, tuples and
dicts of tensors); a tensor reached otherwise (an attribute of an arbitrary object) gets no
gradient — docs/python.md says so.
"""
import functools
import math
import types

import torch

_API = "flashgrad.torch.flex_attention"
_NEG_INF = float("-inf")


# ---- the BlockMask as per-tile kinds -------------------------------------------------------------

_EMPTY, _PARTIAL, _FULL = 0, 1, 2


def _dense_blocks(num, idx, nkb):
    """(Bm, Hm, nqb, nkb) bool: tile (r, c) listed in the first num[..., r] entries of idx[..., r, :]."""
    Bm, Hm, nqb = num.shape
    out = torch.zeros(Bm, Hm, nqb, nkb + 1, dtype=torch.bool)
    take = torch.arange(idx.shape[-1]).view(1, 1, 1, -1) < num.unsqueeze(-1).long()
    # columns not taken go to the spare column nkb, dropped below
    col = torch.where(take, idx.long().clamp(0, nkb), torch.full_like(idx.long(), nkb))
    out.scatter_(3, col, True)
    return out[..., :nkb]


def _tile_kinds(block_mask, L, S):
    """(kinds (Bm, Hm, nqb, nkb) uint8, Q_BLOCK, KV_BLOCK, mask_mod) of block_mask for L queries
    and S keys; no block mask: one full tile."""
    if block_mask is None:
        return torch.full((1, 1, 1, 1), _FULL, dtype=torch.uint8), max(L, 1), max(S, 1), None
    qbs, kbs = (int(x) for x in block_mask.BLOCK_SIZE)
    nqb, nkb = -(-L // qbs), -(-S // kbs)
    num, idx = block_mask.kv_num_blocks.cpu(), block_mask.kv_indices.cpu()
    if num.shape[-1] < nqb:
        raise ValueError("%s: block_mask has %d query blocks of %d but the queries need %d"
                         % (_API, num.shape[-1], qbs, nqb))
    num, idx = num[..., :nqb], idx[..., :nqb, :]
    kinds = torch.zeros(num.shape + (nkb,), dtype=torch.uint8)
    kinds[_dense_blocks(num, idx, nkb)] = _PARTIAL
    if block_mask.full_kv_num_blocks is not None:
        fnum = block_mask.full_kv_num_blocks.cpu()[..., :nqb]
        fidx = block_mask.full_kv_indices.cpu()[..., :nqb, :]
        kinds[_dense_blocks(fnum, fidx, nkb)] = _FULL
    return kinds, qbs, kbs, block_mask.mask_mod


def _call_mod(fn, what, *args):
    try:
        return fn(*args)
    except Exception as e:
        raise type(e)("%s: %s raised on a tile of index tensors (flashgrad calls it once per tile with "
                      "broadcasting b, h, q_idx, kv_idx tensors, not per element): %s" % (_API, what, e)) from e


def _mask_tensor(kinds, qbs, kbs, mask_mod, L, S):
    """The bool mask (Bm, Hm, L, S): full tiles True, empty False, partial ones mask_mod's (called
    once, on all partial tiles at once). Built tile-shaped, (Bm, Hm, nqb, qbs, nkb, kbs), then cut
    to L x S (a view)."""
    Bm, Hm, nqb, nkb = kinds.shape
    m6 = torch.empty((Bm, Hm, nqb, qbs, nkb, kbs), dtype=torch.bool)
    m6.copy_((kinds == _FULL)[:, :, :, None, :, None].expand_as(m6))
    part = (kinds == _PARTIAL).nonzero()
    if part.shape[0]:
        if mask_mod is None:
            raise ValueError("%s: block_mask has partial blocks but no mask_mod" % _API)
        bi, hi, r, c = part.unbind(1)
        # indices past the end (the last tiles' padding) are clamped: their elements are cut below
        qi = ((r * qbs).view(-1, 1, 1) + torch.arange(qbs).view(1, -1, 1)).clamp(max=max(L - 1, 0))
        ki = ((c * kbs).view(-1, 1, 1) + torch.arange(kbs).view(1, 1, -1)).clamp(max=max(S - 1, 0))
        got = _call_mod(mask_mod, "mask_mod", bi.view(-1, 1, 1).to(torch.int32), hi.view(-1, 1, 1).to(torch.int32),
                        qi.to(torch.int32), ki.to(torch.int32))
        m6[bi, hi, r, :, c, :] = torch.as_tensor(got).to(torch.bool).expand(part.shape[0], qbs, kbs)
    return m6.view(Bm, Hm, nqb * qbs, nkb * kbs)[:, :, :L, :S]


# ---- tensors a score_mod captures ---------------------------------------------------------------

def _captured(fn, limit=4):
    """The tensors that require grad reachable from callable fn (closure, defaults, referenced
    globals, partial arguments, bound self, nn.Module parameters), in a fixed order, no repeats."""
    found, seen = [], set()

    def add(x, depth):
        if id(x) in seen or depth > limit:
            return
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            if x.requires_grad:
                found.append(x)
        elif isinstance(x, torch.nn.Module):
            for t in list(x.parameters()) + list(x.buffers()):
                add(t, depth)
        elif isinstance(x, (list, tuple)):
            for y in x:
                add(y, depth + 1)
        elif isinstance(x, dict):
            for y in x.values():
                add(y, depth + 1)
        elif isinstance(x, functools.partial):
            add(x.func, depth + 1)
            add(x.args, depth + 1)
            add(x.keywords, depth + 1)
        elif isinstance(x, types.MethodType):
            add(x.__self__, depth + 1)
            add(x.__func__, depth + 1)
        elif isinstance(x, types.FunctionType):
            for cell in x.__closure__ or ():
                try:
                    add(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
            add(x.__defaults__ or (), depth + 1)
            add(x.__kwdefaults__ or {}, depth + 1)
            g = x.__globals__
            for name in x.__code__.co_names:
                if name in g:
                    add(g[name], depth + 1)
        elif callable(x) and hasattr(x, "__call__") and hasattr(type(x), "__call__"):
            if hasattr(x, "__dict__"):
                add(vars(x), depth + 1)

    add(fn, 0)
    return found


# ---- the torch path (a score_mod): one query-block row of tiles at a time ------------------------

class _Rows:
    """What the forward and the backward share: the tile kinds, and per query block the gathered
    key columns and their visibility."""

    def __init__(self, kinds, qbs, kbs, mask_mod, L, S):
        self.kinds, self.qbs, self.kbs, self.mask_mod, self.L, self.S = kinds, qbs, kbs, mask_mod, L, S

    def row(self, r, B, Hq):
        """(q0, q1, cols (Sr,) long, visible (B|1, Hq|1, Lr, Sr) bool or None for all) of query
        block r; cols empty when no key is visible to any (b, h)."""
        kinds, qbs, kbs, L, S = self.kinds, self.qbs, self.kbs, self.L, self.S
        q0, q1 = r * qbs, min(L, (r + 1) * qbs)
        k = kinds[:, :, r]                                   # (Bm, Hm, nkb)
        blocks = (k.amax((0, 1)) > _EMPTY).nonzero().flatten()
        if blocks.numel() == 0:
            return q0, q1, blocks, None
        cols = (blocks.view(-1, 1) * kbs + torch.arange(kbs).view(1, -1)).flatten()
        keep = cols < S
        cols = cols[keep]
        kc = k[:, :, blocks].repeat_interleave(kbs, 2)[:, :, keep]   # (Bm, Hm, Sr) per column
        if bool((kc == _FULL).all()):
            return q0, q1, cols, None
        vis = (kc == _FULL).unsqueeze(2).expand(-1, -1, q1 - q0, -1).clone()
        part = (kc == _PARTIAL).any((0, 1)).nonzero().flatten()  # the columns of partial tiles
        if part.numel():
            if self.mask_mod is None:
                raise ValueError("%s: block_mask has partial blocks but no mask_mod" % _API)
            Bm, Hm = kc.shape[:2]
            got = _call_mod(self.mask_mod, "mask_mod", torch.arange(Bm, dtype=torch.int32).view(-1, 1, 1, 1),
                            torch.arange(Hm, dtype=torch.int32).view(1, -1, 1, 1),
                            torch.arange(q0, q1, dtype=torch.int32).view(1, 1, -1, 1),
                            cols[part].to(torch.int32).view(1, 1, 1, -1))
            got = torch.as_tensor(got).to(torch.bool).expand(Bm, Hm, q1 - q0, part.numel())
            ispart = (kc[:, :, part] == _PARTIAL).unsqueeze(2)
            vis[:, :, :, part] |= got & ispart
        return q0, q1, cols, vis


def _row_scores(q, k, cols, q0, q1, scale):
    """scale · q[:, :, q0:q1] k[:, :, cols]^T as (B, Hq, Lr, Sr), query head h on K/V head h // G."""
    B, Hq, _, E = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    qr = q[:, :, q0:q1].reshape(B, Hkv, G * (q1 - q0), E)
    s = torch.matmul(qr, k[:, :, cols].transpose(-1, -2))
    return s.view(B, Hq, q1 - q0, cols.numel()) * scale


def _apply_mod(score_mod, s, q0, q1, cols):
    B, Hq = s.shape[:2]
    out = _call_mod(score_mod, "score_mod", s, torch.arange(B, dtype=torch.int32).view(-1, 1, 1, 1),
                    torch.arange(Hq, dtype=torch.int32).view(1, -1, 1, 1),
                    torch.arange(q0, q1, dtype=torch.int32).view(1, 1, -1, 1),
                    cols.to(torch.int32).view(1, 1, 1, -1))
    out = torch.as_tensor(out)
    if out.shape != s.shape:
        out = out.expand(s.shape)
    return out.to(s.dtype)


def _gqa_pv(p, v, cols):
    """p (B, Hq, Lr, Sr) @ v[:, :, cols] (B, Hkv, Sr, Ev) -> (B, Hq, Lr, Ev)."""
    B, Hq, Lr, Sr = p.shape
    Hkv = v.shape[1]
    out = torch.matmul(p.reshape(B, Hkv, (Hq // Hkv) * Lr, Sr), v[:, :, cols])
    return out.view(B, Hq, Lr, v.shape[-1])


class _FlexFunction(torch.autograd.Function):
    """forward(q, k, v, rows, score_mod, scale, *captured) -> (out, lse); lse has no gradient."""

    @staticmethod
    def forward(ctx, q, k, v, rows, score_mod, scale, *captured):
        B, Hq, L, _ = q.shape
        out = q.new_zeros((B, Hq, L, v.shape[-1]))
        lse = q.new_full((B, Hq, L), _NEG_INF)
        for r in range(-(-L // rows.qbs)):
            q0, q1, cols, vis = rows.row(r, B, Hq)
            if cols.numel() == 0:
                continue
            s = _apply_mod(score_mod, _row_scores(q, k, cols, q0, q1, scale), q0, q1, cols)
            if vis is not None:
                s = s.masked_fill(~vis, _NEG_INF)
            m = s.amax(-1, keepdim=True)
            m.nan_to_num_(0.0, 0.0, 0.0)  # a row with no key (m = -inf): p = exp(-inf) = 0
            p = s.sub(m).exp_()  # s may be a view of what score_mod returned: never written
            l = p.sum(-1, keepdim=True)
            o = _gqa_pv(p, v, cols) / torch.where(l > 0, l, torch.ones_like(l))
            out[:, :, q0:q1] = o
            lse[:, :, q0:q1] = (m + torch.log(l)).squeeze(-1)
        ctx.rows, ctx.score_mod, ctx.scale, ctx.n_cap = rows, score_mod, scale, len(captured)
        ctx.save_for_backward(q, k, v, out, lse, *captured)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if torch.is_grad_enabled():
            raise RuntimeError("%s: double backward (create_graph=True) is not supported" % _API)
        q, k, v, out, lse = ctx.saved_tensors[:5]
        captured = ctx.saved_tensors[5:]
        rows, score_mod, scale = ctx.rows, ctx.score_mod, ctx.scale
        B, Hq, L, _ = q.shape
        Hkv = k.shape[1]
        G = Hq // Hkv
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dcap = [torch.zeros_like(c) for c in captured]
        if dout is None:
            return (None,) * (6 + len(captured))
        dout = dout.to(q.dtype)
        D = (dout * out).sum(-1, keepdim=True)   # rowsum(dO ∘ O) = Σ_j P_ij dP_ij
        for r in range(-(-L // rows.qbs)):
            q0, q1, cols, vis = rows.row(r, B, Hq)
            if cols.numel() == 0:
                continue
            Lr, Sr = q1 - q0, cols.numel()
            s1 = _row_scores(q, k, cols, q0, q1, scale)
            with torch.enable_grad():
                s_in = s1.detach().requires_grad_(True)
                s2 = _apply_mod(score_mod, s_in, q0, q1, cols)
            sf = s2.detach() if vis is None else s2.detach().masked_fill(~vis, _NEG_INF)
            lr = lse[:, :, q0:q1].unsqueeze(-1)
            p = torch.exp(sf - torch.where(torch.isfinite(lr), lr, torch.zeros_like(lr)))
            p = torch.where(torch.isfinite(lr), p, torch.zeros_like(p))
            do = dout[:, :, q0:q1]
            # dP = dO V^T;  dS = P ∘ (dP − D)  (softmax's backward), 0 where masked (P = 0 there)
            dp = torch.matmul(do.reshape(B, Hkv, G * Lr, -1), v[:, :, cols].transpose(-1, -2)).view(B, Hq, Lr, Sr)
            ds2 = p * (dp - D[:, :, q0:q1])
            # through score_mod: dS1 = ∂score_mod/∂s · dS2 and the captured tensors' gradients
            if s2.requires_grad:
                want = [s_in] + list(captured)
                with torch.enable_grad():
                    g = torch.autograd.grad(s2, want, ds2, allow_unused=True)
                ds1 = g[0] if g[0] is not None else torch.zeros_like(s1)
                for i, gc in enumerate(g[1:]):
                    if gc is not None:
                        dcap[i] += gc
            else:
                ds1 = torch.zeros_like(s1)
            ds1 = ds1 * scale
            # dQ = dS1 K;  dK = dS1^T Q;  dV = P^T dO   (summed over the G query heads of a K/V head)
            dq[:, :, q0:q1] += torch.matmul(ds1.reshape(B, Hkv, G * Lr, Sr), k[:, :, cols]).view(B, Hq, Lr, -1)
            ds1g = ds1.reshape(B, Hkv, G * Lr, Sr).transpose(-1, -2)
            dk.index_add_(2, cols, torch.matmul(ds1g, q[:, :, q0:q1].reshape(B, Hkv, G * Lr, -1)))
            pg = p.reshape(B, Hkv, G * Lr, Sr).transpose(-1, -2)
            dv.index_add_(2, cols, torch.matmul(pg, do.reshape(B, Hkv, G * Lr, -1)))
        return (dq, dk, dv, None, None, None) + tuple(dcap)


# ---- the entry point ----------------------------------------------------------------------------

def _check(query, key, value, block_mask, enable_gqa):
    for n, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: %s must be a torch.Tensor, got %s" % (_API, n, type(t).__name__))
        if t.device.type != "cpu":
            raise ValueError("%s: %s is on %s; flashgrad's flex_attention runs on CPU tensors" % (_API, n, t.device))
        if t.dim() != 4:
            raise NotImplementedError("NYI: query, key, and value must be 4D tensors")
        if not t.is_floating_point() or t.dtype != query.dtype:
            raise ValueError("Expected query, key, and value to have the same dtype, but got query.dtype: %s, "
                             "key.dtype: %s, and value.dtype: %s instead." % (query.dtype, key.dtype, value.dtype))
    if query.size(-1) != key.size(-1):
        raise ValueError("Expect query and key/value to have the same embedding dimension but got E=%d and E=%d."
                         % (query.size(-1), key.size(-1)))
    if key.shape[:3] != value.shape[:3]:
        raise ValueError("%s: key %s and value %s must agree in (B, Hkv, S)" % (_API, tuple(key.shape),
                                                                              tuple(value.shape)))
    if (not enable_gqa) and query.size(-3) != key.size(-3):
        raise ValueError("Expect query and key/value to have the same number of heads but got Hq=%d and Hkv=%d. "
                         "Try setting enable_gqa=True for GQA." % (query.size(-3), key.size(-3)))
    if enable_gqa and (key.size(1) == 0 or query.size(1) % key.size(1) != 0):
        raise ValueError("Expect number of query heads to be a multiple of kv heads for GQA but got Hq=%d and "
                         "Hkv=%d." % (query.size(1), key.size(1)))
    if query.size(0) != key.size(0):
        raise ValueError("%s: query and key/value have batch sizes %d and %d (flashgrad needs them equal)"
                         % (_API, query.size(0), key.size(0)))
    if block_mask is not None:
        if not hasattr(block_mask, "kv_num_blocks") or not hasattr(block_mask, "BLOCK_SIZE"):
            raise TypeError("%s: block_mask must be a torch.nn.attention.flex_attention.BlockMask, got %s"
                            % (_API, type(block_mask).__name__))
        bq, bk = block_mask.seq_lengths
        if bq < query.size(-2) or bk < key.size(-2):
            raise ValueError("block_mask was created for block_mask.shape=%s but got q_len=%d and kv_len=%d. "
                             "As the block mask was created for a smaller length than you're using it for, you "
                             "likely need to create a new block mask." % (tuple(block_mask.shape), query.size(-2),
                                                                          key.size(-2)))
        Bm, Hm = block_mask.kv_num_blocks.shape[:2]
        if Bm not in (1, query.size(0)) or Hm not in (1, query.size(1)):
            raise ValueError("%s: block_mask is for (B, H) = (%d, %d), which does not broadcast to (%d, %d)"
                             % (_API, Bm, Hm, query.size(0), query.size(1)))


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    """The entry point (docstring of _flex_attention). Under torch.compile it is not traced: the
    tile loop depends on the block mask's values, so the compiled graph breaks around the call and
    runs it as it is (with fullgraph=True torch.compile refuses it)."""
    return _flex_attention_eager(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse,
                                 kernel_options, return_aux=return_aux)


def _flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                    return_lse=False, kernel_options=None, *, return_aux=None):
    """torch.nn.attention.flex_attention.flex_attention on CPU tensors, with a backward.

    query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev); float32 or float64 (float16 and
    bfloat16 are computed in float32 and cast back). score_mod(score, b, h, q_idx, kv_idx) and the
    block mask's mask_mod(b, h, q_idx, kv_idx) are torch functions as written for PyTorch; flashgrad
    calls them on whole tiles of broadcasting index tensors. block_mask: a BlockMask from
    create_block_mask / BlockMask.from_kv_blocks (its B and H may be 1: broadcast). scale None =
    1/sqrt(E). Returns out (B, Hq, L, Ev), or (out, lse) with return_lse (natural log, no
    gradient; -inf for a query that sees no key, whose output is 0), or (out, AuxOutput) with
    return_aux=AuxRequest(lse=True). Gradients flow to query, key, value and to the tensors
    score_mod captures (module docstring). kernel_options are accepted and ignored."""
    _check(query, key, value, block_mask, enable_gqa)
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux. return_lse is deprecated, please use "
                         "return_aux=AuxRequest(lse=True) instead.")
    if return_aux is not None and getattr(return_aux, "max_scores", False):
        raise ValueError("%s: return_aux max_scores is not supported (lse is)" % _API)
    if score_mod is not None and not callable(score_mod):
        raise TypeError("%s: score_mod must be callable, got %s" % (_API, type(score_mod).__name__))
    B, Hq, L, E = query.shape
    S = key.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(E) if E else 1.0
    dt = query.dtype
    cdt = torch.float64 if dt == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    kinds, qbs, kbs, mask_mod = _tile_kinds(block_mask, L, S)
    if score_mod is None and value.shape[-1] == E and E > 0:
        # the C flash kernels, with the block mask as a bool tensor mask (None: no mask at all)
        from ._torch_ops import attn_fwd
        mask = None
        if block_mask is not None and not bool((kinds == _FULL).all()):
            m = _mask_tensor(kinds, qbs, kbs, mask_mod, L, S)
            mask = m.expand(B, Hq, L, S)
        o, lse2 = attn_fwd(q.contiguous(), k.contiguous(), v.contiguous(), mask, None, None, float(scale), 0, 0.0,
                           -1, -1, 0.0)
        out = o
        lse = (lse2[0].double() + lse2[1]).to(cdt) if cdt == torch.float32 else lse2[0]
    else:
        rows = _Rows(kinds, qbs, kbs, mask_mod, L, S)
        fn = score_mod if score_mod is not None else (lambda s, b, h, i, j: s)
        cap = _captured(score_mod) if score_mod is not None else []
        out, lse = _FlexFunction.apply(q, k, v, rows, fn, float(scale), *cap)
    out = out.to(dt)
    lse = lse.detach()
    if return_aux is not None:
        from torch.nn.attention.flex_attention import AuxOutput
        return out, AuxOutput(lse=lse if getattr(return_aux, "lse", False) else None, max_scores=None)
    if return_lse:
        return out, lse
    return out


_flex_attention_eager = torch.compiler.disable(_flex_attention)
flex_attention.__doc__ = _flex_attention.__doc__
