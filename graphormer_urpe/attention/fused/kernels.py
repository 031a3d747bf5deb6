r"""The Triton kernels of :mod:`graphormer_urpe.attention.fused.launch` (see its docstring for
the math, the tiling, the dropout and the CUDA-graph safety).

The kernels are plain functions here, decorated with ``triton.jit`` on first use
(:func:`kernels`). Triton reads ``TRITON_INTERPRET`` when a function is decorated, and
``triton.language`` decorates its own helpers (``tl.zeros``, ``tl.max``, ``tl.rand``, ...) when
Triton is first imported, which ``torch_geometric`` and ``torch._dynamo`` already do. So the
kernels call Triton builtins only (Philox and the reductions restated) and are decorated
lazily: the variable only needs to be set before the first call. The interpreter multiplies
bfloat16 tiles wrongly (it reads their raw bits), so under it bfloat16 tiles are converted to
float32 (exactly) before each tile product.

Triton is optional: this module imports without it (``tl`` is then ``None`` and
:func:`fused_available` ``False``).
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch

try:  # optional: the kernels need Triton, importing this module does not
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised by a test that hides triton
    tl = None  # type: ignore[assignment]

__all__ = ["fused_available", "interpreting", "kernels"]


def interpreting() -> bool:
    """Whether Triton's interpreter is on (``TRITON_INTERPRET`` set to a true value)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # older Triton: read the variable itself
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def fused_available(device: torch.device) -> bool:
    """Whether the fused kernels can run on ``device``: Triton is importable and the device is
    CUDA, or the CPU with Triton's interpreter on (``TRITON_INTERPRET=1``)."""
    if tl is None:
        return False
    device = torch.device(device)
    if device.type == "cuda":
        return True
    return device.type == "cpu" and interpreting()


# ---------------------------------------------------------------------------------------------
# Kernels. Plain functions here, decorated with ``triton.jit`` on first use (:func:`kernels`),
# in a namespace of their own in which they call each other.


def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``a @ b`` accumulated in float32; ``UPCAST``: both operands converted to float32 first
    (exact for bfloat16 values; Triton's interpreter multiplies bfloat16 tiles wrongly)."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


def _scores(
    q, k, bias_ptrs, valid, sm_scale,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """``[BLOCK_M, BLOCK_N]`` float32 scores ``q k^T * sm_scale + bias``, ``-inf`` off range."""
    s = _dot(q, tl.trans(k), PRECISION, UPCAST) * sm_scale
    if HAS_BIAS:
        s += tl.load(bias_ptrs, mask=valid, other=0.0).to(tl.float32)
    return tl.where(valid, s, float("-inf"))


def _tile(base, rows, cols, s_row, s_col, mask):
    """The ``[len(rows), len(cols)]`` tile ``base[rows * s_row + cols * s_col]``, 0 off
    ``mask``."""
    return tl.load(base + rows[:, None] * s_row + cols[None, :] * s_col, mask=mask, other=0.0)


def _batch_head(bh, H):
    """Batch and head (int64) of program row ``bh`` of a ``(B * H, ...)`` grid."""
    return (bh // H).to(tl.int64), (bh % H).to(tl.int64)


def _scale(table_h, stride_tr, index_ptrs, valid):
    """The ``C`` tile (float32, 0 off range) gathered through the index, and the index tile."""
    idx = tl.load(index_ptrs, mask=valid, other=0)
    c = tl.load(table_h + idx * stride_tr, mask=valid, other=0.0).to(tl.float32)
    return c, idx


def _max_combine(a, b):
    return tl.maximum(a, b)


def _add_combine(a, b):
    return a + b


def _uniform(seed, offset):
    """The float32 uniforms in ``[0, 1)`` of ``tl.rand(seed, offset)`` for an int64 ``offset``
    tile: the same Philox4x32 (10 rounds) and conversion, restated with Triton builtins only
    (see :func:`kernels`)."""
    key = seed.to(tl.uint64)
    k0 = (key & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((key >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = offset.to(tl.uint32)
    c1 = (offset >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    ROUND_A: tl.constexpr = 0xD2511F53
    ROUND_B: tl.constexpr = 0xCD9E8D57
    KEY_A: tl.constexpr = 0x9E3779B9
    KEY_B: tl.constexpr = 0xBB67AE85
    for _ in tl.static_range(10):
        prev0 = c0
        prev2 = c2
        c0 = tl.umulhi(ROUND_B, prev2) ^ c1 ^ k0
        c2 = tl.umulhi(ROUND_A, prev0) ^ c3 ^ k1
        c1 = tl.mul(ROUND_B, prev2, sanitize_overflow=False)
        c3 = tl.mul(ROUND_A, prev0, sanitize_overflow=False)
        k0 = tl.add(k0, KEY_A, sanitize_overflow=False)
        k1 = tl.add(k1, KEY_B, sanitize_overflow=False)
    x = c0.to(tl.int32, bitcast=True)
    x = tl.where(x < 0, ~x, x)
    return x * 4.6566127342e-10


def _keep(seed_ptr, bh, offs_m, offs_n, n_q, n_k, p_drop, inv_keep):
    """The dropout keep-mask tile: ``inv_keep`` where ``rand(seed, position) >= p_drop``, else 0.
    ``position`` is the flat index ``((b H + h) N_q + i) N_k + j`` (64-bit)."""
    seed = tl.load(seed_ptr)
    lin = (bh.to(tl.int64) * n_q + offs_m[:, None]) * n_k + offs_n[None, :]
    u = _uniform(seed, lin)
    return tl.where(u >= p_drop, inv_keep, 0.0)


def _fwd_kernel(
    Q, K, V, Out, Lse, Bias, Table, Index, Seed,
    sqb, sqh, sqm, sqd,
    skb, skh, skn, skd,
    svb, svh, svn, svd,
    sob, soh, som, sod,
    sbb, sbh, sbm, sbn,
    stab_r, stab_h,
    sib, sim, sin,
    H, n_q, n_k, d, sm_scale, p_drop, inv_keep,
    HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    b, h = _batch_head(bh, H)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < n_q
    d_ok = offs_d < d
    q = _tile(Q + b * sqb + h * sqh, offs_m, offs_d, sqm, sqd, m_ok[:, None] & d_ok[None, :])
    k_bh = K + b * skb + h * skh
    v_bh = V + b * svb + h * svh
    bias_bh = Bias + b * sbb + h * sbh
    table_h = Table + h * stab_h
    index_b = Index + b * sib
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0.0, tl.float32)
    for start_n in range(0, n_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < n_k
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = _tile(k_bh, offs_n, offs_d, skn, skd, kv_mask)
        v = _tile(v_bh, offs_n, offs_d, svn, svd, kv_mask)
        valid = m_ok[:, None] & n_ok[None, :]
        bias_ptrs = bias_bh + offs_m[:, None] * sbm + offs_n[None, :] * sbn
        s = _scores(q, k, bias_ptrs, valid, sm_scale, HAS_BIAS, PRECISION, UPCAST)
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_combine))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no -inf - -inf on dead rows
        p = tl.exp(s - m_use[:, None])
        alpha = tl.exp(m_i - m_use)
        l_i = l_i * alpha + tl.reduce(p, 1, _add_combine)
        w = p
        if HAS_SCALE:
            index_ptrs = index_b + offs_m[:, None] * sim + offs_n[None, :] * sin
            c, idx = _scale(table_h, stab_r, index_ptrs, valid)
            w = w * c
        if HAS_DROPOUT:
            w = w * _keep(Seed, bh, offs_m, offs_n, n_q, n_k, p_drop, inv_keep)
        acc = acc * alpha[:, None] + _dot(w.to(v.dtype), v, PRECISION, UPCAST)
        m_i = m_new
    live = l_i > 0.0
    out = acc / tl.where(live, l_i, 1.0)[:, None]
    tl.store(
        Out + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
        out.to(Out.dtype.element_ty),
        mask=m_ok[:, None] & d_ok[None, :],
    )
    lse = tl.where(live, m_i + tl.log(tl.where(live, l_i, 1.0)), 0.0)
    tl.store(Lse + bh.to(tl.int64) * n_q + offs_m, lse, mask=m_ok)


def _bwd_kv_kernel(
    Q, K, V, DO, Lse, Delta, DK, DV, Bias, Table, Index, Seed,
    sqb, sqh, sqm, sqd,
    skb, skh, skn, skd,
    svb, svh, svn, svd,
    sdob, sdoh, sdom, sdod,
    sbb, sbh, sbm, sbn,
    stab_r, stab_h,
    sib, sim, sin,
    H, n_q, n_k, d, sm_scale, p_drop, inv_keep,
    HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    b, h = _batch_head(bh, H)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    n_ok = offs_n < n_k
    d_ok = offs_d < d
    kv_mask = n_ok[:, None] & d_ok[None, :]
    k = _tile(K + b * skb + h * skh, offs_n, offs_d, skn, skd, kv_mask)
    v = _tile(V + b * svb + h * svh, offs_n, offs_d, svn, svd, kv_mask)
    q_bh = Q + b * sqb + h * sqh
    do_bh = DO + b * sdob + h * sdoh
    row_bh = bh.to(tl.int64) * n_q
    bias_bh = Bias + b * sbb + h * sbh
    table_h = Table + h * stab_h
    index_b = Index + b * sib
    dk = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
    dv = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
    for start_m in range(0, n_q, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        m_ok = offs_m < n_q
        qd_mask = m_ok[:, None] & d_ok[None, :]
        q = _tile(q_bh, offs_m, offs_d, sqm, sqd, qd_mask)
        do = _tile(do_bh, offs_m, offs_d, sdom, sdod, qd_mask)
        lse = tl.load(Lse + row_bh + offs_m, mask=m_ok, other=0.0)
        delta = tl.load(Delta + row_bh + offs_m, mask=m_ok, other=0.0)
        valid = m_ok[:, None] & n_ok[None, :]
        bias_ptrs = bias_bh + offs_m[:, None] * sbm + offs_n[None, :] * sbn
        s = _scores(q, k, bias_ptrs, valid, sm_scale, HAS_BIAS, PRECISION, UPCAST)
        p = tl.exp(s - lse[:, None])  # [BLOCK_M, BLOCK_N] float32, 0 off range
        dw = _dot(do, tl.trans(v), PRECISION, UPCAST)  # dO V^T, float32
        w = p
        if HAS_SCALE:
            index_ptrs = index_b + offs_m[:, None] * sim + offs_n[None, :] * sin
            c, idx = _scale(table_h, stab_r, index_ptrs, valid)
            w = w * c
            dw = dw * c
        if HAS_DROPOUT:
            keep = _keep(Seed, bh, offs_m, offs_n, n_q, n_k, p_drop, inv_keep)
            w = w * keep
            dw = dw * keep
        dv += _dot(tl.trans(w.to(v.dtype)), do, PRECISION, UPCAST)
        ds = p * (dw - delta[:, None])
        dk += _dot(tl.trans(ds.to(q.dtype)), q, PRECISION, UPCAST)
    row = (bh.to(tl.int64) * n_k + offs_n) * d  # DK / DV are contiguous [B, H, N_k, d]
    ptrs = row[:, None] + offs_d[None, :]
    tl.store(DK + ptrs, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + ptrs, dv.to(DV.dtype.element_ty), mask=kv_mask)


def _bwd_q_kernel(
    Q, K, V, DO, Lse, Delta, DQ, Bias, Table, Index, Seed, DBias, DTable,
    sqb, sqh, sqm, sqd,
    skb, skh, skn, skd,
    svb, svh, svn, svd,
    sdob, sdoh, sdom, sdod,
    sbb, sbh, sbm, sbn,
    stab_r, stab_h,
    sib, sim, sin,
    H, n_q, n_k, d, sm_scale, p_drop, inv_keep, repl, repl_stride,
    HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    NEED_DBIAS: tl.constexpr, NEED_DTABLE: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b, h = _batch_head(bh, H)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < n_q
    d_ok = offs_d < d
    qd_mask = m_ok[:, None] & d_ok[None, :]
    q = _tile(Q + b * sqb + h * sqh, offs_m, offs_d, sqm, sqd, qd_mask)
    do = _tile(DO + b * sdob + h * sdoh, offs_m, offs_d, sdom, sdod, qd_mask)
    row_bh = bh.to(tl.int64) * n_q
    lse = tl.load(Lse + row_bh + offs_m, mask=m_ok, other=0.0)
    delta = tl.load(Delta + row_bh + offs_m, mask=m_ok, other=0.0)
    k_bh = K + b * skb + h * skh
    v_bh = V + b * svb + h * svh
    bias_bh = Bias + b * sbb + h * sbh
    table_h = Table + h * stab_h
    index_b = Index + b * sib
    dbias_rows = (row_bh + offs_m) * n_k  # DBias is contiguous [B, H, N_q, N_k]
    # this program's copy of the table gradient ([repl, R, H] float32 scratch)
    dtable_h = DTable + ((bh * tl.num_programs(1) + pid_m) % repl).to(tl.int64) * repl_stride + h
    dq = tl.full([BLOCK_M, BLOCK_D], 0.0, tl.float32)
    for start_n in range(0, n_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < n_k
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = _tile(k_bh, offs_n, offs_d, skn, skd, kv_mask)
        v = _tile(v_bh, offs_n, offs_d, svn, svd, kv_mask)
        valid = m_ok[:, None] & n_ok[None, :]
        bias_ptrs = bias_bh + offs_m[:, None] * sbm + offs_n[None, :] * sbn
        s = _scores(q, k, bias_ptrs, valid, sm_scale, HAS_BIAS, PRECISION, UPCAST)
        p = tl.exp(s - lse[:, None])
        dw = _dot(do, tl.trans(v), PRECISION, UPCAST)  # dO V^T, float32
        if HAS_DROPOUT:
            dw = dw * _keep(Seed, bh, offs_m, offs_n, n_q, n_k, p_drop, inv_keep)
        if HAS_SCALE:
            index_ptrs = index_b + offs_m[:, None] * sim + offs_n[None, :] * sin
            c, idx = _scale(table_h, stab_r, index_ptrs, valid)
            if NEED_DTABLE:
                tl.atomic_add(dtable_h + idx * H, dw * p, mask=valid, sem="relaxed")
            dw = dw * c
        ds = p * (dw - delta[:, None])
        if NEED_DBIAS:
            tl.store(DBias + dbias_rows[:, None] + offs_n[None, :], ds, mask=valid)
        dq += _dot(ds.to(k.dtype), k, PRECISION, UPCAST)
    dq_ptrs = DQ + (row_bh + offs_m)[:, None] * d + offs_d[None, :]  # contiguous [B, H, N_q, d]
    tl.store(dq_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=qd_mask)


def _mask_kernel(
    Out, Seed, n_q, n_k, p_drop, inv_keep, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    bh = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < n_q
    rows = (bh.to(tl.int64) * n_q + offs_m) * n_k
    for start_n in range(0, n_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keep = _keep(Seed, bh, offs_m, offs_n, n_q, n_k, p_drop, inv_keep)
        valid = m_ok[:, None] & (offs_n < n_k)[None, :]
        tl.store(Out + rows[:, None] + offs_n[None, :], keep, mask=valid)


_KERNEL_FUNCTIONS = (
    _dot,
    _tile,
    _batch_head,
    _max_combine,
    _add_combine,
    _uniform,
    _scores,
    _scale,
    _keep,
    _fwd_kernel,
    _bwd_kv_kernel,
    _bwd_q_kernel,
    _mask_kernel,
)
_BUILT: dict[bool, types.SimpleNamespace] = {}


def kernels() -> types.SimpleNamespace:
    """The kernels decorated with ``triton.jit``, built once per interpreter setting.

    Triton decides between compiling and interpreting a function when it is decorated, so the
    decoration waits for the first use: each function is rebuilt over a private copy of this
    module's namespace in which the names of the others are bound to their decorated versions
    (how Triton resolves calls between kernels).

    The kernels call Triton builtins only, never the ``@triton.jit`` helpers of
    ``triton.language`` (``tl.zeros``, ``tl.max``, ``tl.sum``, ``tl.rand``): those are
    decorated when Triton is first imported (``torch_geometric`` and ``torch._dynamo``
    import it), so they stay bound to the compiler if the interpreter is switched on later.
    For the row reductions, ``tl.reduce`` gets the combine functions of ``tl.max`` /
    ``tl.sum`` when this Triton has them (the interpreter reduces those with numpy), else
    our own.
    """
    interpret = interpreting()
    built = _BUILT.get(interpret)
    if built is None:
        import triton

        namespace: dict[str, Any] = dict(globals())
        for fn in _KERNEL_FUNCTIONS:
            clone = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)
            clone.__qualname__ = fn.__qualname__
            # a new function object has no annotations: without them Triton would take the
            # tl.constexpr parameters (block sizes, flags) for runtime arguments
            clone.__annotations__ = dict(fn.__annotations__)
            clone.__module__ = fn.__module__
            namespace[fn.__name__] = triton.jit(clone)
        standard = getattr(tl, "standard", None)
        for name, theirs in (
            ("_max_combine", "_elementwise_max"),
            ("_add_combine", "_sum_combine"),
        ):
            combine = getattr(standard, theirs, None)
            if combine is not None:
                namespace[name] = combine
        built = types.SimpleNamespace(
            **{fn.__name__.strip("_"): namespace[fn.__name__] for fn in _KERNEL_FUNCTIONS}
        )
        _BUILT[interpret] = built
    return built
