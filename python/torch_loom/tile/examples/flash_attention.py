"""Flash attention forward: softmax(Q K^T * scale) V without the S x S
matrix. Each program takes BLOCK_M queries of one (batch, head) and walks
the keys in blocks of BLOCK_N with an online softmax (running max m_i and
sum l_i); causal masking skips the blocks above the
diagonal."""

import math

import torch

import torch_loom.tile as tl


@tl.jit
def attention_fwd_kernel(Q, K, V, Out, sm_scale, stride_qz, stride_qh, stride_qm,
                         stride_kz, stride_kh, stride_kn, stride_vz, stride_vh, stride_vn,
                         stride_oz, stride_oh, stride_om, H, N_CTX,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX, other=0.0)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    qk_scale = sm_scale
    hi = N_CTX
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        valid = cols[None, :] < N_CTX
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc, mask=offs_m[:, None] < N_CTX)


def _fake(q, k, v, causal=False, scale=None):
    return torch.empty_like(q)


@tl.kernel_op("loom_tile::attention", fake=_fake)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """Attention over [batch, heads, seq, head_dim] tensors (one sequence
    length for queries and keys), like F.scaled_dot_product_attention."""
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"loom_tile::attention: q, k, v must be [batch, heads, seq, head_dim] of one "
                         f"shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    d = q.shape[-1]
    if d not in (16, 32, 64, 128):
        raise ValueError(f"loom_tile::attention: head_dim must be 16, 32, 64 or 128, got {d}")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    z, h, n, _ = q.shape
    out = torch.empty_like(q)
    if z * h * n == 0:
        return out
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    # 256 queries per program share each block of keys and values (read and
    # transposed once for all of them); 64 keys per step
    bm, bn = (256, 64) if n > 128 else (64, 32)
    grid = (tl.cdiv(n, bm), z * h)
    attention_fwd_kernel[grid](q, k, v, out, scale, q.stride(0), q.stride(1), q.stride(2),
                               k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
                               v.stride(2), out.stride(0), out.stride(1), out.stride(2), h, n,
                               HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal)
    return out
