"""Layer norm over the last dim, forward and backward, with autograd:
one program per row computes y, the mean and 1/std; backward computes dx
per row and the weight and bias gradients per block of columns (a sum over
rows in a fixed order: no atomics, results independent of the threads)."""

import torch

import torch_loom.tile as tl


@tl.jit
def _layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0)
    b = tl.load(B + cols, mask=mask, other=0.0)
    y = xc * rstd * w + b
    tl.store(Y + row * stride + cols, y, mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@tl.jit
def _layer_norm_bwd_dx(DX, DY, X, W, Mean, Rstd, stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + row * stride + cols, dx, mask=mask)


@tl.jit
def _layer_norm_bwd_dwdb(DW, DB, DY, X, Mean, Rstd, stride, M, N,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    dw = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r in range(0, M, BLOCK_M):
        rows = r + tl.arange(0, BLOCK_M)
        rmask = rows < M
        mask = rmask[:, None] & cmask[None, :]
        offs = rows[:, None] * stride + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + rows, mask=rmask, other=0.0)
        rstd = tl.load(Rstd + rows, mask=rmask, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
        dw += tl.where(mask, dy * xhat, 0.0)
        db += dy
    tl.store(DW + cols, tl.sum(dw, axis=0), mask=cmask)
    tl.store(DB + cols, tl.sum(db, axis=0), mask=cmask)


def _rows(x):
    if x.dim() == 2 and x.is_contiguous():
        return x
    return x.reshape(-1, x.shape[-1]).contiguous()


def _fake_fwd(x, weight, bias, eps):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return (torch.empty_like(x), x.new_empty((rows,), dtype=torch.float32),
            x.new_empty((rows,), dtype=torch.float32))


@tl.kernel_op("loom_tile::layer_norm_fwd", fake=_fake_fwd)
def layer_norm_fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                   eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = x.shape[-1]
    if weight.shape != (n,) or bias.shape != (n,):
        raise ValueError(f"loom_tile::layer_norm: weight and bias must have shape ({n},), got "
                         f"{tuple(weight.shape)} and {tuple(bias.shape)}")
    x2 = _rows(x)
    m = x2.shape[0]
    y = torch.empty_like(x2)
    device = x.device
    mean = torch.empty(m, dtype=torch.float32, device=device)
    rstd = torch.empty(m, dtype=torch.float32, device=device)
    if m and n:
        _layer_norm_fwd[(m,)](x2, y, weight.contiguous(), bias.contiguous(), mean, rstd,
                              x2.stride(0), n, eps, BLOCK_N=tl.next_power_of_2(n))
    return (y if x2 is x else y.reshape(x.shape)), mean, rstd


def _fake_bwd(dy, x, weight, mean, rstd):
    return torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)


@tl.kernel_op("loom_tile::layer_norm_bwd", fake=_fake_bwd)
def layer_norm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                   rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = x.shape[-1]
    x2, dy2 = _rows(x), _rows(dy)
    m = x2.shape[0]
    dx = torch.empty_like(x2)
    dw = torch.empty((n,), dtype=weight.dtype, device=x.device)
    db = torch.empty((n,), dtype=weight.dtype, device=x.device)
    if m and n:
        block = tl.next_power_of_2(n)
        _layer_norm_bwd_dx[(m,)](dx, dy2, x2, weight.contiguous(), mean, rstd, x2.stride(0), n,
                                 BLOCK_N=block)
        bn = min(64, block)
        _layer_norm_bwd_dwdb[(tl.cdiv(n, bn),)](dw, db, dy2, x2, mean, rstd, x2.stride(0), m, n,
                                               BLOCK_M=16, BLOCK_N=bn)
    elif n:
        dw.zero_()
        db.zero_()
    return dx.reshape(x.shape), dw, db


def _setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)


def _backward(ctx, dy, dmean, drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_bwd(dy, x, weight, mean, rstd)
    return dx, dw, db, None


layer_norm_fwd.register_autograd(_backward, setup_context=_setup)


def layer_norm(x, weight, bias, eps=1e-5):
    """torch.nn.functional.layer_norm over the last dim, differentiable."""
    return layer_norm_fwd(x, weight, bias, eps)[0]
