"""The Muscle loss of FedMuscle (SPEC §6), computed exactly by tensor contraction.

For the peer's own representations ``a`` (B, d) and M received matrices ``z^1..z^M`` (B, d), all with unit
rows, an anchor sample i and an index tuple j = (j_1, ..., j_M) in [B]^M are scored

    score(i, j) = Σ_m <a_i, z^m_{j_m}> / tau  -  gamma Σ_{m<m'} <z^m_{j_m}, z^{m'}_{j_m'}>,
    gamma = 1/tau_prev - 1/tau,

and the loss is the mean over anchors of ``-score(i, (i,...,i)) + log Σ_{j in [B]^M} exp score(i, j)``.

The log-partition log Z_i sums over B^M tuples per anchor (B^(M+1) terms in all; 10^9 at B = 32, M = 5), so it
is never materialised. Write U_m = a z^m^T / tau (B x B, depends on the anchor) and the anchor-independent
cross-term tensor L(j) = -gamma Σ_{m<m'} <z^m_{j_m}, z^{m'}_{j_m'}> over [B]^M. Then

    Z_i = Σ_j exp(L(j)) Π_m exp(U_m[i, j_m]),

which is contracted index by index. exp(L) is built once (shifted by its maximum over (j_1, j_2) for each
setting of the remaining indices); j_1 and j_2 are contracted together by ONE matrix product of the row-wise
outer product exp(U_1[i]) ⊗ exp(U_2[i]) (B x B^2) with exp(L) viewed as (B^2 x B^(M-2)) -- the only
O(B^(M+1)) step, at full matrix-multiply speed --, then j_3, ..., j_M by exact batched log-sum-exps over
tensors of B^(M-1), B^(M-2), ... entries. Memory is O(B^M) (one buffer of that size plus ones B times
smaller), and the tuple space is further cut into chunks of at most ``max_elements`` entries (the trailing
tuple indices are enumerated chunk by chunk and the partial sums merged in log space).

Numerics: the matrix product uses per-factor shifts (row maxima of U_1 and U_2, per-column maxima of L)
carried in log space; every later index is eliminated with an exact per-entry log-sum-exp. Entries of the
product that come out below 2^-60 of their shifts (only with extreme temperatures, when the shifts are far
from the dominant term) are recomputed exactly in log space, so any positive temperatures work in float32
without overflow or underflow to zero.

Gradients flow into the anchor only. d log Z_i / d U_m[i, j] is the probability that j_m = j under the tuple
distribution of anchor i; those marginals are computed in the same pass (a reverse sweep through the same
contraction, one more matrix product) by a custom autograd function, so memory stays bounded by the chunk
and backward costs no more than forward.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ._util import Others, check_temperature, stack_others, unit_rows

#: tau^(N) and tau^(N-1) of SPEC §6 (gamma = 1/0.15 - 1/0.2 = 5/3).
MUSCLE_TAU = 0.2
MUSCLE_TAU_PREV = 0.15
#: Default bound on the number of tuple-tensor elements held at once (64 MiB per float32 buffer).
DEFAULT_MAX_ELEMENTS = 1 << 24

# Product entries below 2^-60 (relative to their shifts) are recomputed exactly in log space.
_LOG_FLAG = -60.0 * math.log(2.0)
# Tuple indices contracted together by the one matrix product (more: faster, but looser shifts).
_LINEAR_INDICES = 2


def _prepare(anchor: torch.Tensor, others: Others, tau: float, tau_prev: float):
    """Unit rows, the unary matrices U (M, B, B) and the pairwise matrices P (M, M, B, B) = -gamma <z^a, z^b>."""
    t = check_temperature("tau", tau)
    tp = check_temperature("tau_prev", tau_prev)
    if anchor.dim() != 2:
        raise ValueError(f"muscle_loss: anchor must be (B, d), got shape {tuple(anchor.shape)}")
    work = anchor.dtype if anchor.dtype in (torch.float32, torch.float64) else torch.float32
    a = unit_rows(anchor.to(work))
    z = stack_others(others, a, what="muscle_loss others")  # (M, B, d), detached
    gamma = 1.0 / tp - 1.0 / t
    u = torch.einsum("id,mjd->mij", a, z) / t  # (M, B_i, B_j), carries the anchor's gradient
    m, b, d = z.shape
    flat = z.reshape(m * b, d)
    pair = (flat @ flat.t()).view(m, b, m, b).permute(0, 2, 1, 3).contiguous() * (-gamma)  # (M, M, B, B)
    return u, pair


def _digits(idx: torch.Tensor, base: int, n: int) -> list[torch.Tensor]:
    """Base-``base`` digits of ``idx`` (most significant first), ``n`` of them."""
    out = []
    for k in range(n - 1, -1, -1):
        out.append(torch.div(idx, base**k, rounding_mode="floor") % base)
    return out


class _Plan:
    """How the tuple space [B]^M is cut: the first p indices are contracted inside a chunk, the trailing
    M - p indices are enumerated, ``c`` of their B^(M-p) combinations per chunk."""

    def __init__(self, m: int, b: int, max_elements: int):
        if max_elements < 1:
            raise ValueError(f"max_elements must be a positive integer, got {max_elements}")
        p = 1
        while p < m and b ** (p + 1) <= max_elements:
            p += 1
        self.m, self.b, self.p = m, b, p
        self.n_suffix = b ** (m - p)
        self.c = max(1, min(self.n_suffix, max_elements // (b**p)))

    def chunks(self):
        for s0 in range(0, self.n_suffix, self.c):
            yield s0, min(self.n_suffix, s0 + self.c)


def _prefix_cross(pair: torch.Tensor, p: int) -> torch.Tensor:
    """Σ_{a<b<p} P_ab[j_a, j_b] as a fresh tensor of shape (B,)*p (summed small-to-large to limit work)."""
    b = pair.shape[-1]
    lp = pair.new_zeros(b)
    for k in range(1, p):
        inc = None
        for a in range(k):
            shape = [1] * (k + 1)
            shape[a] = b
            shape[k] = b
            term = pair[a, k].reshape(shape)
            inc = term if inc is None else inc + term
        lp = inc.clone() if k == 1 else inc.add_(lp.unsqueeze(-1))
    return lp


def _chunk_cross(pair: torch.Tensor, lp: torch.Tensor, plan: _Plan, sfx: list[torch.Tensor]) -> torch.Tensor:
    """The cross-term tensor L over (j_1..j_p) x (a chunk of suffix tuples), shape (B,)*p + (c,).

    Without a suffix (one chunk) this is ``lp`` itself, which the caller may then overwrite."""
    m, p, b = plan.m, plan.p, plan.b
    if m == p:
        return lp.unsqueeze(-1)
    c = sfx[0].numel()
    extra = pair.new_zeros(c)
    for x in range(p, m):
        for y in range(x + 1, m):
            extra = extra + pair[x, y][sfx[x - p], sfx[y - p]]
    extra = extra.reshape([1] * p + [c])
    for a in range(p):
        col = pair[a, p][:, sfx[0]]
        for y in range(p + 1, m):
            col = col + pair[a, y][:, sfx[y - p]]
        shape = [1] * (p + 1)
        shape[a] = b
        shape[p] = c
        extra = extra + col.reshape(shape)
    return extra.add_(lp.unsqueeze(-1))


def _cross_block(pair: torch.Tensor, q: int, n: int, rest: list[torch.Tensor]) -> torch.Tensor:
    """L[j_1..j_q, rest] for all (j_1..j_q) and n given completions ``rest`` (digits of indices q+1..M, each (n,)):
    shape (n, B^q)."""
    m, b = pair.shape[0], pair.shape[-1]
    out = pair.new_zeros([n] + [b] * q)
    for y in range(1, q):
        for x in range(y):
            shape = [1] * (q + 1)
            shape[1 + x] = b
            shape[1 + y] = b
            out += pair[x, y].reshape(shape)
    for y in range(q, m):
        ry = rest[y - q]
        for x in range(q):
            shape = [n] + [1] * q
            shape[1 + x] = b
            out += pair[x, y][:, ry].t().reshape(shape)
        for x in range(q, y):
            out += pair[x, y][rest[x - q], ry].reshape([n] + [1] * q)
    return out.reshape(n, -1)


def _unary_block(u: torch.Tensor, q: int, rows: torch.Tensor) -> torch.Tensor:
    """Σ_{k<q} U_k[i, j_k] for anchors ``rows`` and all (j_1..j_q): shape (n, B^q)."""
    out = u[0][rows]
    for k in range(1, q):
        out = (out[:, :, None] + u[k][rows][:, None, :]).reshape(rows.numel(), -1)
    return out


def _one_hot(idx: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(len(idx), n) matrix with a one in column idx[k] of row k."""
    out = torch.zeros(idx.numel(), n, dtype=dtype, device=idx.device)
    out[torch.arange(idx.numel(), device=idx.device), idx] = 1.0
    return out


def _add_marginals(marg: torch.Tensor, rows: torch.Tensor, w: torch.Tensor, q: int) -> None:
    """Add the j_1..j_q marginals of the weights ``w`` (n, B^q) into rows ``rows`` of ``marg[0..q-1]``."""
    n, b = w.shape[0], marg.shape[-1]
    wv = w.reshape([n] + [b] * q)
    for k in range(q):
        dims = [1 + x for x in range(q) if x != k]
        part = wv.sum(dim=dims) if dims else wv
        if rows is None:
            marg[k] += part
        else:  # scatter-add into anchor rows as a one-hot product (deterministic, unlike index_add_ on CUDA)
            marg[k] += _one_hot(rows, marg.shape[1], part.dtype).t() @ part


def _exact_entries(u, pair, plan, q, s0, c, flat_i, flat_r, max_elements, grad_out=None, marg=None):
    """Exact log Σ_{j_1..j_q} exp(Σ_{k<q} U_k[i, j_k] + L[j_1..j_q, r]) for flagged (anchor i, column r) entries
    of the linear-domain stage, in log space.

    With ``grad_out`` given, also adds grad_out times the marginals of j_1..j_q into rows i of ``marg``.
    """
    b, p = plan.b, plan.p
    out = u.new_empty(flat_i.numel())
    step = max(1, max_elements // b**q)
    for k0 in range(0, flat_i.numel(), step):
        ii = flat_i[k0 : k0 + step]
        rr = flat_r[k0 : k0 + step]
        n = ii.numel()
        s_local = rr % c
        pre = torch.div(rr, c, rounding_mode="floor")
        rest = _digits(pre, b, p - q) + _digits(s_local + s0, b, plan.m - p)
        logits = _unary_block(u, q, ii) + _cross_block(pair, q, n, rest)  # (n, B^q)
        lse = torch.logsumexp(logits, dim=1)
        out[k0 : k0 + step] = lse
        if grad_out is not None:
            w = torch.exp(logits - lse[:, None]).mul_(grad_out[k0 : k0 + step, None])
            _add_marginals(marg, ii, w, q)
    return out


def _chunk_pass(u, pair, lp, plan, s0, s1, max_elements, need_marginals):
    """log Z over one chunk of tuples for every anchor, and (optionally) the normalised j_m marginals (M, B, B).

    Stage 1 (linear domain, shifted): R[i, r] = Σ_{j_1, j_2} e_1[i, j_1] e_2[i, j_2] T[j_1, j_2, r] with
    e_k = exp(U_k - row max) and T = exp(L - column max over (j_1, j_2)), as ONE matrix product
    (B_i x B^2) @ (B^2 x B^(p-2) c) of the outer product e_1 ⊗ e_2 with T: the O(B^(M+1)) step. Entries
    far below their shifts are recomputed exactly. Stage 2: the remaining prefix indices by exact
    log-sum-exps over tensors B times smaller, then the chunk's suffix tuples. The reverse sweep gives the
    marginals d log Z / d U_k[i, j] (one more matrix product, a @ T^T, for the first stage).
    """
    m, b, p = plan.m, plan.b, plan.p
    nb = u.shape[1]  # anchors
    q = 1  # indices handled by the linear-domain stage; the outer product e_1 ⊗ .. ⊗ e_q is B^(q+1) large
    while q < min(_LINEAR_INDICES, p) and b ** (q + 2) <= max(max_elements, b * b):
        q += 1
    sidx = torch.arange(s0, s1, device=u.device)
    sfx = _digits(sidx, b, m - p) if m > p else []
    c = s1 - s0

    lc = _chunk_cross(pair, lp, plan, sfx).reshape(b**q, -1)  # (B^q, N), N = B^(p-q) c
    col_max = lc.amax(dim=0)  # (N,)
    t_mat = lc.sub_(col_max).exp_()  # exp(L - column max), in place
    # outer product of the shifted unary factors of j_1..j_q: (B_i, B^q)
    kron = torch.exp(u[0] - u[0].amax(dim=1, keepdim=True))
    for k in range(1, q):
        e_k = torch.exp(u[k] - u[k].amax(dim=1, keepdim=True))
        kron = (kron[:, :, None] * e_k[:, None, :]).reshape(nb, -1)
    row_shift = sum(u[k].amax(dim=1) for k in range(q))  # (B_i,)
    r = kron @ t_mat  # (B_i, N): the O(B^(M+1)) contraction, one matrix product
    log_r = torch.log(r)
    flagged = log_r < _LOG_FLAG
    log_r.add_(row_shift[:, None]).add_(col_max[None, :])
    fl_i = fl_r = None
    if bool(flagged.any()):
        fl_i, fl_r = flagged.nonzero(as_tuple=True)
        log_r[fl_i, fl_r] = _exact_entries(u, pair, plan, q, s0, c, fl_i, fl_r, max_elements)

    logs = [log_r]  # logs[k]: after eliminating j_1..j_{q+k}; shape (B_i, B^(p-q-k) c)
    for k in range(q, p):
        x = logs[-1].view(nb, b, -1) + u[k][:, :, None]
        mx = x.amax(dim=1)
        x.sub_(mx[:, None, :]).exp_()
        logs.append(x.sum(dim=1).log_().add_(mx))
        del x

    final = logs[-1]  # (B_i, c)
    if m > p:
        final = final + sum(u[p + x][:, sfx[x]] for x in range(m - p))
    logz = torch.logsumexp(final, dim=1)  # (B_i,)
    if not need_marginals:
        return logz, None

    marg = u.new_zeros(u.shape)  # (M, B_i, B)
    g = torch.exp(final - logz[:, None])  # (B_i, c): distribution over the chunk's suffix tuples
    for x in range(m - p):
        marg[p + x] += g @ _one_hot(sfx[x], b, g.dtype)
    for k in range(p - 1, q - 1, -1):  # reverse sweep over the log-domain steps (index k eliminated)
        lvl = k - q + 1
        w = logs[lvl - 1].view(nb, b, -1) + u[k][:, :, None]
        w.sub_(logs[lvl][:, None, :]).exp_().mul_(g[:, None, :])
        marg[k] += w.sum(dim=2)
        g = w.view(nb, -1)
        logs[lvl] = None
    # g = d log Z / d log_r.  Linear stage: log_r = log r + shifts.
    if fl_i is not None:
        g_fl = g[fl_i, fl_r].clone()
    a = g / r
    if fl_i is not None:
        a[fl_i, fl_r] = 0.0
        _exact_entries(u, pair, plan, q, s0, c, fl_i, fl_r, max_elements, grad_out=g_fl, marg=marg)
    _add_marginals(marg, None, kron * (a @ t_mat.t()), q)
    return logz, marg


def _log_partition(u: torch.Tensor, pair: torch.Tensor, max_elements: int, need_marginals: bool):
    """log Z_i for all anchors (and d log Z_i / d U when asked), merging chunks in log space."""
    m, nb, b = u.shape
    plan = _Plan(m, b, max_elements)
    lp = _prefix_cross(pair, plan.p)
    acc = u.new_full((nb,), float("-inf"))
    acc_q = u.new_zeros(u.shape) if need_marginals else None
    for s0, s1 in plan.chunks():
        logz, q = _chunk_pass(u, pair, lp, plan, s0, s1, max_elements, need_marginals)
        new = torch.logaddexp(acc, logz)
        if need_marginals:
            acc_q.mul_(torch.exp(acc - new)[None, :, None]).add_(q * torch.exp(logz - new)[None, :, None])
        acc = new
    return acc, acc_q


class _MuscleLogPartition(torch.autograd.Function):
    """log Z_i = log Σ_{j in [B]^M} exp(Σ_m U_m[i, j_m] + L(j)); differentiable in U only."""

    @staticmethod
    def forward(ctx, u: torch.Tensor, pair: torch.Tensor, max_elements: int) -> torch.Tensor:
        need = bool(ctx.needs_input_grad[0])
        logz, q = _log_partition(u.detach(), pair.detach(), max_elements, need)
        if need:
            ctx.save_for_backward(q)
        return logz

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logz: torch.Tensor):
        (q,) = ctx.saved_tensors
        return q * grad_logz[None, :, None], None, None


def _positive_score(u: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
    """score(i, (i, ..., i)) for every anchor i."""
    m = u.shape[0]
    pos = torch.diagonal(u, dim1=1, dim2=2).sum(0)
    for x in range(m):
        for y in range(x + 1, m):
            pos = pos + torch.diagonal(pair[x, y])
    return pos


def muscle_loss(
    anchor: torch.Tensor,
    others: Others,
    tau: float = MUSCLE_TAU,
    tau_prev: float = MUSCLE_TAU_PREV,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> torch.Tensor:
    """The Muscle loss of SPEC §6, exact, in O(B^(M+1)) matrix-product work and bounded memory.

    ``anchor`` (B, d) is the peer's own representation of the public batch (gradients flow into it);
    ``others`` is a list of M (B, d) tensors or one (M, B, d) tensor received from M neighbours (constants).
    Rows are L2-normalised inside. gamma = 1/tau_prev - 1/tau (5/3 for the defaults 0.2 and 0.15); with
    tau_prev = tau the loss is the sum of M pairwise InfoNCE losses, and with M = 1 it is InfoNCE.
    ``max_elements`` bounds the size of the tuple tensors held at once (the tuple space is processed in
    chunks of at most that many elements); the value does not change the result.
    """
    u, pair = _prepare(anchor, others, tau, tau_prev)
    logz = _MuscleLogPartition.apply(u, pair, int(max_elements))
    loss = (logz - _positive_score(u, pair)).mean()
    return loss.to(anchor.dtype) if anchor.dtype != loss.dtype else loss


def muscle_loss_naive(
    anchor: torch.Tensor, others: Others, tau: float = MUSCLE_TAU, tau_prev: float = MUSCLE_TAU_PREV
) -> torch.Tensor:
    """The Muscle loss by enumeration: all B^(M+1) scores materialised, then a log-sum-exp.

    Same inputs and value as ``muscle_loss``; memory and time grow as B^(M+1). For tests and benchmarks.
    """
    u, pair = _prepare(anchor, others, tau, tau_prev)
    m, nb, b = u.shape
    score = u.new_zeros([nb] + [1] * m)
    for x in range(m):
        shape = [nb] + [1] * m
        shape[1 + x] = b
        score = score + u[x].reshape(shape)
    for x in range(m):
        for y in range(x + 1, m):
            shape = [1] * (m + 1)
            shape[1 + x] = b
            shape[1 + y] = b
            score = score + pair[x, y].reshape(shape)
    score = score.reshape(nb, -1)
    logz = torch.logsumexp(score, dim=1)
    stride = sum(b**k for k in range(m))  # flat index of (i, ..., i) is i * stride
    pos = score.gather(1, (torch.arange(nb, device=u.device) * stride)[:, None])[:, 0]
    loss = (logz - pos).mean()
    return loss.to(anchor.dtype) if anchor.dtype != loss.dtype else loss
