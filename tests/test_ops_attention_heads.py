"""scaled_dot_product_attention over the heads of a fused qkv projection, as
a GPT block makes them: q, k and v are [B, H, T, D] views of one [B, T, 3C]
product, whose batch and head dims do not merge into one stride. Loom's
attention reads them where they lie and writes its output and the three
gradients in the layout the meta function gives (heads inner to tokens):
results as the CPU's, bit for bit those of contiguous operands, and no copy
kernel launched by the attention's forward or backward."""
import pytest
import torch
import torch.nn.functional as F
from nn_compare import close

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


def split_heads(qkv, heads):
    """q, k, v of a [B, T, 3C] product as [B, H, T, C / H] views."""
    B, T, C3 = qkv.shape
    return [t.view(B, T, heads, C3 // 3 // heads).transpose(1, 2)
            for t in qkv.split(C3 // 3, dim=2)]


def attend(qkv, heads, causal, g, contiguous=False):
    """The attention output of the leaf qkv and the gradient of qkv for the
    output gradient g ([B, T, C])."""
    q, k, v = split_heads(qkv, heads)
    if contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    y = o.transpose(1, 2).reshape(g.shape)
    (dqkv,) = torch.autograd.grad(y, qkv, g)
    return o, dqkv


# B, T, H, D: one tile, several tiles with a partial last one, the widest
# tiled heads, and heads past them (the exact row kernels)
SHAPES = [(2, 16, 2, 8), (3, 70, 4, 16), (1, 20, 2, 256), (2, 9, 2, 300)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_strided_heads_agree_with_cpu(dtype, causal, shape):
    B, T, H, D = shape
    torch.manual_seed(3)
    x = torch.randn(B, T, 3 * H * D).to(dtype)
    g = torch.randn(B, T, H * D).to(dtype)
    oc, gc = attend(x.clone().requires_grad_(), H, causal, g)
    od, gd = attend(x.to("loom").requires_grad_(), H, causal, g.to("loom"))
    close(od, oc.detach(), dtype, scale=2.0)
    close(gd, gc, dtype, scale=4.0)
    # the output in the meta function's layout: heads inner to tokens
    assert od.shape == (B, H, T, D) and od.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_strided_heads_match_contiguous_operands_bitwise(causal, shape):
    B, T, H, D = shape
    torch.manual_seed(4)
    x = torch.randn(B, T, 3 * H * D, device="loom")
    g = torch.randn(B, T, H * D, device="loom")
    o, dx = attend(x.clone().requires_grad_(), H, causal, g)
    oc, dxc = attend(x.clone().requires_grad_(), H, causal, g, contiguous=True)
    assert torch.equal(o.cpu(), oc.cpu())
    assert torch.equal(dx.cpu(), dxc.cpu())


def device_kernels(fn):
    """The names of the device kernels fn launches."""
    from torch.profiler import ProfilerActivity, profile

    torch.loom.synchronize()
    with torch.loom.fusion.mode(0), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.loom.synchronize()
    return [e.name for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_strided_heads_launch_no_copies():
    B, T, H, D = 4, 128, 4, 64
    torch.manual_seed(5)
    x = torch.randn(B, T, 3 * H * D, device="loom")
    q, k, v = split_heads(x, H)
    fwd = device_kernels(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert fwd and all(n.startswith("attention.") for n in fwd), fwd

    qkv = x.clone().requires_grad_()
    q, k, v = split_heads(qkv, H)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # an output gradient in the output's own layout, as the block's
    # projection gives it back
    go = torch.randn(B, T, H, D, device="loom").transpose(1, 2)
    bwd = device_kernels(lambda: torch.autograd.grad(o, (q, k, v), go))
    assert bwd and all(n.startswith("attention.") for n in bwd), bwd


def _backward_into(q, k, v, g, causal, buf, dim):
    """loom::sdpa_backward_into writing dq, dk, dv into the three slices of
    buf along dim (viewed as heads, as split_heads views them), and the
    reference: the aten backward's gradients."""
    aten = torch.ops.aten
    fwd = aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.0, causal)
    out, lse = fwd[0], fwd[1]
    ref = aten._scaled_dot_product_fused_attention_overrideable_backward(
        g, q, k, v, None, [True, True, True, False], out, lse, fwd[2], fwd[3], fwd[4], fwd[5],
        0.0, causal, fwd[6], fwd[7])
    heads = split_heads(buf, q.shape[1]) if dim == 2 else list(buf.unbind(dim))
    torch.ops.loom.sdpa_backward_into(g, q, k, v, None, out, lse, causal, None, *heads)
    return ref[:3], heads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_backward_into_slices_of_one_buffer_is_the_backward_bit_for_bit(dtype, causal, shape):
    # what the compiler calls instead of the backward and the cat of its
    # gradients into the fused projection's gradient (compiler/attention.py)
    B, T, H, D = shape
    torch.manual_seed(5)
    q, k, v = split_heads(torch.randn(B, T, 3 * H * D).to(dtype).to("loom"), H)
    g = torch.randn(B, H, T, D).to(dtype).to("loom").transpose(1, 2).contiguous().transpose(1, 2)
    for dim, buf in ((2, torch.full((B, T, 3 * H * D), float("nan"), dtype=dtype)),
                     (0, torch.full((3, B, H, T, D), float("nan"), dtype=dtype))):
        ref, heads = _backward_into(q, k, v, g, causal, buf.to("loom"), dim)
        for got, want in zip(heads, ref):
            assert torch.equal(got.cpu(), want.cpu())


def test_backward_into_rejects_bad_gradient_tensors():
    B, T, H, D = 2, 8, 2, 4
    q, k, v = split_heads(torch.randn(B, T, 3 * H * D, device="loom"), H)
    g = torch.randn(B, H, T, D, device="loom")
    fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.0, True)
    out, lse = fwd[0], fwd[1]
    into = torch.ops.loom.sdpa_backward_into
    dq, dk, dv = (torch.empty(B, H, T, D, device="loom") for _ in range(3))
    with pytest.raises(RuntimeError, match=r"loom::sdpa_backward_into: dk must be Float of size"):
        into(g, q, k, v, None, out, lse, True, None, dq, dk[:, :1], dv)
    with pytest.raises(RuntimeError, match=r"loom::sdpa_backward_into: dv must be Float"):
        into(g, q, k, v, None, out, lse, True, None, dq, dk, dv.double())
    with pytest.raises(RuntimeError, match="loom::sdpa_backward_into: expected dq on loom"):
        into(g, q, k, v, None, out, lse, True, None, dq.cpu(), dk, dv)
    with pytest.raises(RuntimeError, match="loom::sdpa_backward_into: dq overlaps itself"):
        into(g, q, k, v, None, out, lse, True, None,
             torch.empty(1, device="loom").expand(B, H, T, D), dk, dv)
    with pytest.raises(RuntimeError, match="loom::sdpa_backward_into: dq and dk share memory"):
        into(g, q, k, v, None, out, lse, True, None, dq, dq, dv)
    # the same memory through another tensor object, and a partial overlap
    with pytest.raises(RuntimeError, match="loom::sdpa_backward_into: dq and dv share memory"):
        into(g, q, k, v, None, out, lse, True, None, dq, dk, dq.view_as(dq))
    buf = torch.empty(B + 1, H, T, D, device="loom")
    with pytest.raises(RuntimeError, match="loom::sdpa_backward_into: dk and dv share memory"):
        into(g, q, k, v, None, out, lse, True, None, dq, buf[:B], buf[1:])
