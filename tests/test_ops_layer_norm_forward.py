"""Layer norm's and RMS norm's forward on loom, whose rows up to 512 wide
are normalised in blocks of 16 rows with their sums side by side: output,
mean and rstd against the CPU and a float64 reference from the same inputs
(loom's error no larger than a small multiple of the CPU's own), row counts
that leave a partial block, widths on both sides of the blocked ones, rows
with a tail past the last vector; and bitwise independence of the thread
count."""
import pytest
import torch
import torch.nn.functional as F

from conftest import digest_with_threads

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

# (rows, row length): GPT's, a partial block, short rows with a tail, the
# widest blocked rows, rows past them, one row
SHAPES = [(2048, 256), (37, 45), (301, 64), (70, 512), (40, 600), (1, 300)]


def inputs(m, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 2 + 3).to(dtype)
    w = (1 + 0.5 * torch.randn(n, generator=g)).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    return x, w, b


def forward(x, w, b, device):
    n = x.shape[-1]
    out = torch.ops.aten.native_layer_norm(x.to(device), [n], w.to(device), b.to(device), 1e-5)
    return [t.cpu() for t in out]


def error(a, ref):
    return (a.double() - ref.double()).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n", SHAPES, ids=str)
def test_layer_norm_forward_matches_cpu_and_float64(dtype, m, n):
    x, w, b = inputs(m, n, dtype)
    got, cpu = forward(x, w, b, "loom"), forward(x, w, b, "cpu")
    ref = forward(x.double(), w.double(), b.double(), "cpu")
    for a, c, r in zip(got, cpu, ref):
        assert a.dtype == c.dtype and a.shape == c.shape
        ulp = torch.finfo(a.dtype).eps * max(1.0, r.abs().max().item())
        assert error(a, r) <= 2 * error(c, r) + 4 * ulp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n", SHAPES, ids=str)
def test_rms_norm_forward_matches_cpu_and_float64(dtype, m, n):
    x, w, _ = inputs(m, n, dtype, seed=1)
    got = F.rms_norm(x.to("loom"), (n,), w.to("loom"), 1e-5).cpu()
    cpu = F.rms_norm(x, (n,), w, 1e-5)
    ref = F.rms_norm(x.double(), (n,), w.double(), 1e-5)
    ulp = torch.finfo(dtype).eps * max(1.0, ref.abs().max().item())
    assert got.dtype == cpu.dtype
    assert error(got, ref) <= 2 * error(cpu, ref) + 4 * ulp


def test_layer_norm_forward_thread_count_independent():
    code = """
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for m, n in ((2048, 256), (301, 45), (37, 600)):
            x = (torch.randn(m, n, generator=g) * 2 + 3).to(dtype).to("loom")
            w = torch.randn(n, generator=g).to(dtype).to("loom")
            b = torch.randn(n, generator=g).to(dtype).to("loom")
            add(*torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5))
            add(*torch.ops.aten._fused_rms_norm(x, [n], w, 1e-5))
    print("DIGEST", h.hexdigest())
    """
    assert digest_with_threads(code, 1) == digest_with_threads(code, 2)
