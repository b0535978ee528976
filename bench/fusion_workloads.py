"""Workloads for adaptive eager (torch.loom.fusion): eager code whose
elementwise launches a loom stream can fuse. Run them under `loom_eager`
and `loom_eager_nofuse` side by side:

    python -m bench.run --workloads fuse_chain10_16M,fuse_mlp_gelu,fuse_mlp_silu,\\
        fuse_ln_block,fuse_adamw_50M,overhead_add,gemm_fp32_1024 \\
        --configs cpu_eager,loom_eager,loom_eager_nofuse --no-limits
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bench.workloads import BW_TRIAD, FMA_FP32, Ctx, Prepared, Skip, Workload, _randn, rotating


def _chain10(ctx: Ctx) -> Prepared:
    """Ten pointwise ops, out of place, over 16M float32 (a loss's or an
    activation's elementwise tail written op by op). Eager writes the last
    one into a tensor the caller keeps, as the chain's reader would. Each
    call takes the next input and output of a ring (workloads.rotating):
    calls on one input would form one fused group that reads it once for
    all of them."""
    n = (1 << 16) if ctx.quick else (1 << 24)

    def chain(t, out=None):
        t = t * 0.5 + 0.25
        t = torch.sin(t)
        t = t * t
        t = torch.tanh(t - 0.1)
        t = torch.sigmoid(t) * 1.5
        t = torch.relu(t - 0.2)
        return torch.sqrt(t + 1.0, out=out)

    if ctx.backend is None:
        fn = rotating(ctx, lambda k: (_randn(n, seed=40 + 100 * k), torch.empty(n)), chain)
    else:
        fn = rotating(ctx, lambda k: (_randn(n, seed=40 + 100 * k),), ctx.compile(chain))
    return Prepared(fn, items=1, bytes=2 * 4 * n, limit=BW_TRIAD, tol=1e-5)


def _mlp(act):
    """A transformer MLP block's forward, op by op: x + W2 act(W1 x + b1) + b2,
    4096 tokens of width 256 (hidden 1024)."""
    def build(ctx: Ctx) -> Prepared:
        tokens, d = (256, 64) if ctx.quick else (4096, 256)
        x = ctx.to(_randn(tokens, d, seed=41))
        w1, b1 = ctx.to(_randn(d, 4 * d, seed=42) / d ** 0.5), ctx.to(_randn(4 * d, seed=43))
        w2, b2 = ctx.to(_randn(4 * d, d, seed=44) / (4 * d) ** 0.5), ctx.to(_randn(d, seed=45))

        def block(x):
            h = torch.mm(x, w1) + b1
            h = act(h)
            return x + (torch.mm(h, w2) + b2)

        flops = 2 * 2 * tokens * d * 4 * d
        block = ctx.compile(block)
        return Prepared(lambda: block(x), items=tokens, flops=flops, limit=FMA_FP32, tol=1e-4)
    return build


def _swiglu(ctx: Ctx) -> Prepared:
    """A SiLU-gated MLP (SwiGLU) block's forward, op by op:
    x + W2 (silu(W1 x) * W3 x), 4096 tokens of width 256 (hidden 1024)."""
    tokens, d = (256, 64) if ctx.quick else (4096, 256)
    x = ctx.to(_randn(tokens, d, seed=46))
    w1 = ctx.to(_randn(d, 4 * d, seed=47) / d ** 0.5)
    w3 = ctx.to(_randn(d, 4 * d, seed=48) / d ** 0.5)
    w2 = ctx.to(_randn(4 * d, d, seed=49) / (4 * d) ** 0.5)

    def block(x):
        return x + torch.mm(F.silu(torch.mm(x, w1)) * torch.mm(x, w3), w2)

    block = ctx.compile(block)
    return Prepared(lambda: block(x), items=tokens, flops=2 * 3 * tokens * d * 4 * d,
                    limit=FMA_FP32, tol=1e-4)


def _ln_block(ctx: Ctx) -> Prepared:
    """A layer-norm-heavy block, op by op (pre-norm residual stream with a
    scaled, shifted, gated update): 8192 x 1024 float32."""
    rows, d = (64, 128) if ctx.quick else (8192, 1024)
    x = ctx.to(_randn(rows, d, seed=50))
    res = ctx.to(_randn(rows, d, seed=51))
    g1, b1 = ctx.to(_randn(d, seed=52)), ctx.to(_randn(d, seed=53))
    scale, shift = ctx.to(_randn(d, seed=54)), ctx.to(_randn(d, seed=55))

    def block(x, res):
        h = F.layer_norm(x + res, (d,), g1, b1)
        h = h * (1 + scale) + shift
        h = F.gelu(h) * torch.sigmoid(h)
        h = F.layer_norm(h + x, (d,))
        return res + 0.5 * h

    block = ctx.compile(block)
    return Prepared(lambda: block(x, res), items=rows, bytes=3 * 4 * rows * d, limit=BW_TRIAD,
                    tol=1e-4)


def _adamw_shapes(d: int, layers: int, vocab: int) -> list[tuple[int, ...]]:
    """The parameter shapes of a GPT-style model: embeddings, then per layer
    attention (qkv, out), MLP (4x) and two layer norms, with biases."""
    shapes = [(vocab, d), (1024, d)]
    for _ in range(layers):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,),
                   (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    return shapes + [(d,), (d,)]


def _adamw(ctx: Ctx) -> Prepared:
    """One AdamW step (foreach=True) over a GPT-style model's parameters:
    about 50M of them in 124 tensors (d 640, 10 layers, vocab 8192)."""
    if ctx.backend is not None:
        raise Skip("an optimizer step: eager only")
    shapes = _adamw_shapes(64, 2, 256) if ctx.quick else _adamw_shapes(640, 10, 8192)
    params = [torch.nn.Parameter(ctx.to(_randn(*s, seed=60 + i) * 0.02)) for i, s in enumerate(shapes)]
    for i, p in enumerate(params):
        p.grad = ctx.to(_randn(*p.shape, seed=200 + i) * 1e-3)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, foreach=True)
    numel = sum(p.numel() for p in params)

    def step():
        opt.step()
        return params[0][:4]

    # per element: read param, grad, exp_avg, exp_avg_sq; write the three states
    return Prepared(step, items=1, bytes=7 * 4 * numel, limit=BW_TRIAD, tol=1e-3)


WORKLOADS = [
    Workload("fuse_chain10_16M", "fusion", "call",
             "ten pointwise ops, out of place, over 16M float32", _chain10),
    Workload("fuse_mlp_gelu", "fusion", "token",
             "MLP block forward x + W2 gelu(W1 x + b1) + b2, 4096 tokens, d 256, hidden 1024",
             _mlp(F.gelu)),
    Workload("fuse_mlp_silu", "fusion", "token",
             "SwiGLU block forward x + W2 (silu(W1 x) * W3 x), 4096 tokens, d 256, hidden 1024",
             _swiglu),
    Workload("fuse_ln_block", "fusion", "row",
             "layer-norm-heavy block: two layer norms, scale/shift, gelu * sigmoid gate, residuals; "
             "8192 x 1024 float32", _ln_block),
    Workload("fuse_adamw_50M", "fusion", "step",
             "AdamW step, foreach=True, over a GPT-style model's ~50M parameters (124 tensors)",
             _adamw),
]
