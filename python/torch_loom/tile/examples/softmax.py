"""Fused row softmax: one program per row, the row read once."""

import torch

import torch_loom.tile as tl


@tl.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)


def _fake(x):
    return torch.empty_like(x)


@tl.kernel_op("loom_tile::softmax", fake=_fake)
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim."""
    if x.dim() == 2 and x.stride(1) == 1:
        x2 = x
    elif x.dim() == 0:
        raise ValueError("loom_tile::softmax: needs at least one dim")
    else:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
    rows, cols = x2.shape
    out = torch.empty_like(x2)
    if rows and cols:
        softmax_kernel[(rows,)](out, x2, x2.stride(0), out.stride(0), cols,
                                BLOCK_SIZE=tl.next_power_of_2(cols))
    return out if x2 is x else out.reshape(x.shape)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(-1, keepdim=True))


softmax.register_autograd(_backward, setup_context=_setup)
