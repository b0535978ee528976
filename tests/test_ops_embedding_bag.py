"""embedding_bag native on loom, against the CPU: sum, mean and max modes,
per_sample_weights, padding_idx, offsets with and without
include_last_offset, empty bags, 2-d input; the forward and the weight's
and per-sample weights' gradients. Nothing may fall back to the CPU."""
import pytest
import torch
import torch.nn.functional as F

from conftest import run_python

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")


def both(fn, *tensors):
    """fn on CPU copies and on loom copies (requiring grad where floating)."""
    cpu = [t.clone().requires_grad_() if t.is_floating_point() else t for t in tensors]
    loom = [t.to("loom").requires_grad_() if t.is_floating_point() else t.to("loom")
            for t in tensors]
    return fn(*cpu), fn(*loom), cpu, loom


def case(dtype, seed, n_idx=40, n_w=17, dim=6):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n_w, dim, generator=g, dtype=dtype)
    idx = torch.randint(0, n_w, (n_idx,), generator=g)
    # bags of varying length with an empty one in the middle and at the end
    offsets = torch.tensor([0, 3, 3, 10, 11, 25, 40][:-1])
    return g, w, idx, offsets


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 4])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_matches_cpu(dtype, mode, padding_idx, include_last_offset):
    g, w, idx, offsets = case(dtype, 1)
    idx[:3] = 4  # a bag of padding only (when padding_idx = 4)
    idx[20] = 4
    if include_last_offset:
        offsets = torch.cat([offsets, torch.tensor([len(idx)])])  # the CSR form
    kw = dict(mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset)
    yc, yl, (wc,), (wl,) = both(lambda w_: F.embedding_bag(idx if w_.device.type == "cpu"
                                                           else idx.to("loom"), w_,
                                                           offsets if w_.device.type == "cpu"
                                                           else offsets.to("loom"), **kw), w)
    tol = dict(atol=0, rtol=0) if mode != "mean" or dtype == torch.float64 else {}
    torch.testing.assert_close(yl.detach().cpu(), yc.detach(), **tol)
    gy = torch.randn(yc.shape, generator=g, dtype=dtype)
    yc.backward(gy)
    yl.backward(gy.to("loom"))
    torch.testing.assert_close(wl.grad.cpu(), wc.grad)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_per_sample_weights(dtype, padding_idx):
    g, w, idx, offsets = case(dtype, 2)
    psw = torch.rand(idx.shape, generator=g, dtype=dtype)
    idx[5] = 2
    fn = lambda w_, p_: F.embedding_bag(idx.to(w_.device), w_, offsets.to(w_.device),
                                        mode="sum", per_sample_weights=p_,
                                        padding_idx=padding_idx)
    yc, yl, (wc, pc), (wl, pl) = both(fn, w, psw)
    torch.testing.assert_close(yl.detach().cpu(), yc.detach())
    gy = torch.randn(yc.shape, generator=g, dtype=dtype)
    yc.backward(gy)
    yl.backward(gy.to("loom"))
    torch.testing.assert_close(wl.grad.cpu(), wc.grad)
    torch.testing.assert_close(pl.grad.cpu(), pc.grad)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_16bit(dtype, mode):
    """16-bit tables: the CPU's values, computed in float32 and rounded once
    (the float32 result rounded is loom's, bit for bit), gradients included."""
    g, w, idx, offsets = case(dtype, 3)
    psw = torch.rand(idx.shape, generator=g, dtype=dtype) if mode == "sum" else None
    fn = lambda w_, *p_: F.embedding_bag(idx.to(w_.device), w_, offsets.to(w_.device), mode=mode,
                                         per_sample_weights=p_[0] if p_ else None, padding_idx=2)
    tensors = (w, psw) if psw is not None else (w,)
    yc, yl, cpu, loom = both(fn, *tensors)
    assert yl.dtype == dtype
    torch.testing.assert_close(yl.detach().cpu(), yc.detach())
    y32 = fn(*[t.float() for t in tensors])
    assert torch.equal(yl.detach().cpu(), y32.to(dtype))
    gy = torch.randn(yc.shape, generator=g, dtype=dtype)
    yc.backward(gy)
    yl.backward(gy.to("loom"))
    for c, d in zip(cpu, loom):
        assert d.grad.dtype == dtype
        torch.testing.assert_close(d.grad.cpu(), c.grad, atol=2e-2, rtol=2e-2)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    # each occurrence of row r scaled by 1 / (r's number of occurrences), as
    # the documentation defines it (the CPU's loop reads the count of
    # another row; CUDA's is this one)
    g = torch.Generator().manual_seed(6)
    w = torch.randn(9, 4, dtype=torch.float64, generator=g)
    idx = torch.tensor([1, 1, 2, 1, 3, 3, 8, 2, 2, 0])
    offs = torch.tensor([0, 2, 4, 7])
    gy = torch.randn(4, 4, dtype=torch.float64, generator=g)
    wl = w.to("loom").requires_grad_()
    F.embedding_bag(idx.to("loom"), wl, offs.to("loom"), mode=mode,
                    scale_grad_by_freq=True).backward(gy.to("loom"))
    bag_of = [0, 0, 1, 1, 2, 2, 2, 3, 3, 3]
    sizes = [2, 2, 3, 3]
    want = torch.zeros_like(w)
    for pos, r in enumerate(idx.tolist()):
        scale = 1.0 / (idx == r).sum().item()
        if mode == "mean":
            scale /= sizes[bag_of[pos]]
        want[r] += scale * gy[bag_of[pos]]
    torch.testing.assert_close(wl.grad.cpu(), want)


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_input_and_module(mode):
    g = torch.Generator().manual_seed(3)
    bag = torch.nn.EmbeddingBag(30, 8, mode=mode)
    inp = torch.randint(0, 30, (5, 7), generator=g)
    inp[0, :3] = 11  # a repeated index
    lbag = torch.nn.EmbeddingBag(30, 8, mode=mode).to("loom")
    lbag.weight.data.copy_(bag.weight.data.to("loom"))
    yc, yl = bag(inp), lbag(inp.to("loom"))
    torch.testing.assert_close(yl.detach().cpu(), yc.detach())
    gy = torch.randn(yc.shape, generator=g)
    yc.backward(gy)
    yl.backward(gy.to("loom"))
    torch.testing.assert_close(lbag.weight.grad.cpu(), bag.weight.grad)
    # int32 indices and offsets
    i32 = torch.randint(0, 30, (12,), generator=g, dtype=torch.int32)
    o32 = torch.tensor([0, 5, 5, 9], dtype=torch.int32)
    torch.testing.assert_close(lbag(i32.to("loom"), o32.to("loom")).detach().cpu(),
                               bag(i32, o32).detach())


def test_embedding_bag_bad_input_names_op():
    w = torch.randn(5, 3, device="loom")
    with pytest.raises(IndexError, match="embedding_bag.*out of range"):
        F.embedding_bag(torch.tensor([0, 7], device="loom"), w,
                        torch.tensor([0], device="loom")).cpu()
    with pytest.raises(RuntimeError, match="per_sample_weights is only supported for mode='sum'"):
        F.embedding_bag(torch.tensor([0, 1], device="loom"), w, torch.tensor([0], device="loom"),
                        mode="mean", per_sample_weights=torch.ones(2, device="loom"))
    with pytest.raises(RuntimeError, match="embedding_bag"):
        torch.ops.aten._embedding_bag(w, torch.tensor([0, 1], device="loom"),
                                      torch.tensor([1], device="loom"), False, 0, False, None,
                                      False, -1)[0].cpu()


def test_embedding_bag_thread_count_does_not_change_bits():
    script = r'''
import hashlib, torch, torch.nn.functional as F
torch.manual_seed(0)
h = hashlib.sha256()
for dtype in (torch.float32, torch.float64):
    w = torch.randn(3000, 16, dtype=dtype).to("loom").requires_grad_()
    idx = torch.randint(0, 3000, (20000,)).to("loom")
    offs = torch.arange(0, 20000, 7).to("loom")
    psw = torch.rand(20000, dtype=dtype).to("loom").requires_grad_()
    for mode in ("sum", "mean", "max"):
        y = F.embedding_bag(idx, w, offs, mode=mode, padding_idx=5,
                            per_sample_weights=psw if mode == "sum" else None)
        grads = torch.autograd.grad(y, (w, psw) if mode == "sum" else (w,),
                                    torch.randn(y.shape, dtype=dtype).to("loom"))
        for t in (y, *grads):
            h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
print("DIGEST", h.hexdigest())
'''
    outs = [run_python(script, env={"LOOM_NUM_THREADS": t, "LOOM_FALLBACK": "error"}).stdout
            for t in ("1", "2")]
    assert "DIGEST" in outs[0] and outs[0] == outs[1]
