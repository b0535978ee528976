"""Vector addition: one program per BLOCK elements."""

import torch

import torch_loom.tile as tl


@tl.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@tl.kernel_op("loom_tile::add", fake=lambda x, y: torch.empty_like(x))
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"loom_tile::add: x {tuple(x.shape)} {x.dtype} and y {tuple(y.shape)} {y.dtype} differ")
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[lambda meta: (tl.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=1024)
    return out


def _backward(ctx, grad):
    return grad, grad


add.register_autograd(_backward)
