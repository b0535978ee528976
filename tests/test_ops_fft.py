"""torch.fft on loom against the CPU, with no op on the CPU fallback: every
transform function, lengths with every kind of factor (1, primes that run
as Bluestein convolutions, powers of two, mixed), batched and strided
inputs, the norm modes, float32 and float64; long transforms (the
four-step passes) and blocks of rows; autograd; stft/istft; results
independent of the thread count and of the CPU features.

Tolerances: the largest error relative to the largest magnitude of the CPU's
result, 2e-5 in single and 1e-12 in double precision (both libraries round
differently; a wrong twiddle or index is off by O(1))."""
import os

import pytest
import torch

from conftest import run_python

DEV = "loom"
SIZES = [1, 2, 17, 64, 97, 360, 1000, 1009]
NORMS = [None, "ortho", "forward", "backward"]
TOL = {torch.float32: 2e-5, torch.float64: 1e-12,
       torch.complex64: 2e-5, torch.complex128: 1e-12}


def close(got, ref):
    assert got.device.type == DEV
    got = got.cpu()
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype,
                                                               ref.shape)
    scale = ref.abs().max().item() if ref.numel() else 1.0
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= TOL[ref.dtype] * max(scale, 1.0), f"error {err} at scale {scale}"


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
REAL_IN = {"rfft", "ihfft"}


@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("real", [torch.float32, torch.float64])
def test_1d_sizes(no_fallback, name, real):
    fn = getattr(torch.fft, name)
    cplx = torch.complex64 if real == torch.float32 else torch.complex128
    for i, n in enumerate(SIZES):
        if name in ("irfft", "hfft") and n == 1:
            continue  # output length 2 (n - 1) from one input: valid below with n=
        x = sample((3, n), real if name in REAL_IN else cplx, seed=i)
        norm = NORMS[i % len(NORMS)]
        close(fn(x.to(DEV), norm=norm), fn(x, norm=norm))
    # explicit output lengths: padding, truncation, odd lengths of the c2r ones
    x = sample((2, 40), real if name in REAL_IN else cplx, seed=99)
    for n in (1, 7, 40, 77):
        close(fn(x.to(DEV), n=n), fn(x, n=n))


@pytest.mark.parametrize("name", ONE_D)
def test_1d_batched_strided_dims(no_fallback, name):
    fn = getattr(torch.fft, name)
    dtype = torch.float64 if name in REAL_IN else torch.complex128
    base = sample((6, 5, 30), dtype, seed=3)
    views = [lambda t: t.transpose(0, 2), lambda t: t[::2, :, ::3], lambda t: t.permute(1, 2, 0)]
    for view in views:
        for dim in (0, 1, -1):
            close(fn(view(base.to(DEV)), dim=dim, norm="ortho"), fn(view(base), dim=dim, norm="ortho"))


ND = ["fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2",
      "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"]


@pytest.mark.parametrize("name", ND)
def test_nd(no_fallback, name):
    fn = getattr(torch.fft, name)
    real_in = name.startswith(("rfft", "ihfft"))
    for dtype, (shape, kwargs) in zip(
            [torch.float32, torch.float64, torch.float64, torch.float32],
            [((12, 10), {}), ((3, 9, 17), {"norm": "ortho"}),
             ((4, 6, 10), {"dim": (0, 2), "norm": "forward"}),
             ((5, 8, 7), {"s": (6, 9), "dim": (-1, 0)})]):
        if dtype == torch.float32 and not real_in:
            dtype = torch.complex64
        elif dtype == torch.float64 and not real_in:
            dtype = torch.complex128
        x = sample(shape, dtype, seed=len(shape))
        xt = x.transpose(0, -1)  # strided
        close(fn(xt.to(DEV), **kwargs), fn(xt, **kwargs))


def test_large_mixed_and_prime(no_fallback):
    x = sample((2, 4 * 9 * 25 * 7), torch.complex64, seed=5)
    close(torch.fft.fft(x.to(DEV)), torch.fft.fft(x))
    x = sample((7919,), torch.complex128, seed=6)  # a prime well above the radices
    close(torch.fft.ifft(x.to(DEV)), torch.fft.ifft(x))
    x = sample((1 << 14,), torch.float32, seed=7)
    close(torch.fft.rfft(x.to(DEV)), torch.fft.rfft(x))


def test_four_step(no_fallback):
    # lengths from 16384 up run as two passes of short transforms (columns
    # with twiddles, then rows); strided, batched, in-place later dims, mixed
    # radices, both directions and dtypes
    x = sample((1 << 15,), torch.complex64, seed=11)
    close(torch.fft.fft(x.to(DEV), norm="ortho"), torch.fft.fft(x, norm="ortho"))
    x = sample((3, 20000), torch.complex128, seed=12)  # 125 x 160
    close(torch.fft.ifft(x.to(DEV)), torch.fft.ifft(x))
    x = sample((4, 16384), torch.complex64, seed=13)
    close(torch.fft.fft(x.to(DEV).t(), dim=0), torch.fft.fft(x.t(), dim=0))
    x = sample((3, 2, 16384), torch.complex64, seed=14)
    close(torch.fft.fftn(x.to(DEV), dim=(2, 0), norm="forward"),
          torch.fft.fftn(x, dim=(2, 0), norm="forward"))
    x = sample((2, 1 << 14), torch.float64, seed=15)
    close(torch.fft.hfft(torch.fft.ifft(x.to(DEV).to(torch.complex128))),
          torch.fft.hfft(torch.fft.ifft(x.to(torch.complex128))))


def test_blocks_of_rows(no_fallback):
    # rows in blocks of a vector's width (16 floats, 8 doubles): contiguous
    # rows transposed into the workspace, columns gathered across rows
    for dtype in (torch.float32, torch.float64):
        x = sample((5, 37, 96), dtype, seed=16)
        close(torch.fft.rfft2(x.to(DEV)), torch.fft.rfft2(x))
        close(torch.fft.irfft2(torch.fft.rfft2(x).to(DEV), s=(37, 96)),
              torch.fft.irfft2(torch.fft.rfft2(x), s=(37, 96)))
        close(torch.fft.irfft(torch.fft.rfft(x).to(DEV), n=95),
              torch.fft.irfft(torch.fft.rfft(x), n=95))


def test_rfft2_panels(no_fallback):
    # a 2-d r2c over the last two dims runs as rows into the column pass's
    # panels (a vector's columns each), then the columns: full and partial
    # panels, several signals, odd and prime (Bluestein) lengths, strided
    # inputs, padding, the norms; the result laid out as the CPU's
    cases = [((256, 300), torch.float32, {}), ((3, 40, 50), torch.float64, {"norm": "ortho"}),
             ((97, 64), torch.float32, {"norm": "forward"}), ((2, 37, 33), torch.float32, {}),
             ((2, 16, 2), torch.float64, {}), ((20, 31), torch.float32, {"s": (24, 40)}),
             ((5, 1, 9), torch.float32, {})]
    for shape, dtype, kwargs in cases:
        x = sample(shape, dtype, seed=shape[-1])
        for xin in (x, x.transpose(-1, -2).contiguous().transpose(-1, -2), x[..., ::2, :]):
            got, ref = torch.fft.rfft2(xin.to(DEV), **kwargs), torch.fft.rfft2(xin, **kwargs)
            close(got, ref)
            assert got.stride() == ref.stride(), (shape, got.stride(), ref.stride())
    x = sample((6, 24, 40), torch.float32, seed=3)
    close(torch.fft.rfftn(x.to(DEV), dim=(-2, -1)), torch.fft.rfftn(x, dim=(-2, -1)))
    # these ran through the panels: no column pass over the result
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        torch.fft.rfft2(x.to(DEV))
        torch.loom.synchronize()
    names = {e.key for e in prof.key_averages()}
    assert {"fft.r2c_panels", "fft.c2c_panels"} <= names and not {"fft.r2c", "fft.c2c"} & names
    close(torch.fft.rfft2(x.to(DEV), dim=(1, 2), norm="ortho"),
          torch.fft.rfft2(x, dim=(1, 2), norm="ortho"))


def test_size_one_and_merged_batch_dims(no_fallback):
    # size-1 batch dims (a trailing channel of 1) are dropped before the row
    # launches: the same values as without them, bit for bit, and the CPU's
    g = torch.Generator().manual_seed(21)
    c = torch.randn(64, 40, dtype=torch.complex64, generator=g)
    x = torch.randn(48, 36, dtype=torch.float64, generator=g)
    for fn, t, kw in ((torch.fft.fft, c, {"dim": 0}), (torch.fft.ifft2, c, {"dim": (0, 1)}),
                      (torch.fft.rfft2, x, {"dim": (0, 1)}), (torch.fft.irfft, c, {"dim": 0})):
        t1 = t[:, None, :, None]
        kw1 = {"dim": tuple(2 * d for d in kw["dim"])} if isinstance(kw["dim"], tuple) else {"dim": 0}
        got = fn(t1.to(DEV), **kw1)
        close(got, fn(t1, **kw1))
        assert torch.equal(got.cpu()[:, 0, :, 0], fn(t.to(DEV), **kw).cpu())
    # batch dims that are one run of rows merge (channels last images, fft
    # over the spatial dims): as the CPU, and as the merged rows bit for bit
    x = torch.randn(40, 33, 3, dtype=torch.complex64, generator=g)
    for kw in ({"dim": 0}, {"dim": (0, 1)}):
        fn = torch.fft.fft if kw["dim"] == 0 else torch.fft.fft2
        got = fn(x.to(DEV), **kw)
        close(got, fn(x, **kw))
    got = torch.fft.fft(x.to(DEV), dim=0).cpu()
    assert torch.equal(got.reshape(40, 99), torch.fft.fft(x.reshape(40, 99).to(DEV), dim=0).cpu())
    r = torch.randn(3, 5, 64, dtype=torch.float64, generator=g)
    close(torch.fft.rfft(r.to(DEV)), torch.fft.rfft(r))
    close(torch.fft.irfft(torch.fft.rfft(r).to(DEV), n=64), torch.fft.irfft(torch.fft.rfft(r), n=64))


def test_out_variants_and_helpers(no_fallback):
    x = sample((4, 16), torch.complex64)
    out = torch.empty(4, 16, dtype=torch.complex64, device=DEV)
    r = torch.fft.fft(x.to(DEV), out=out)
    assert r is out
    close(out, torch.fft.fft(x))
    xr = sample((4, 16), torch.float64)
    out = torch.empty(0, dtype=torch.complex128, device=DEV)
    torch.fft.rfft(xr.to(DEV), out=out)
    close(out, torch.fft.rfft(xr))
    out = torch.empty(0, dtype=torch.float64, device=DEV)
    torch.fft.irfft(torch.fft.rfft(xr).to(DEV), n=16, out=out)
    close(out, torch.fft.irfft(torch.fft.rfft(xr), n=16))
    f = torch.fft.fft(x.to(DEV))
    close(torch.fft.fftshift(f), torch.fft.fftshift(torch.fft.fft(x)))
    close(torch.fft.ifftshift(f, dim=-1), torch.fft.ifftshift(torch.fft.fft(x), dim=-1))


def test_conjugate_input(no_fallback):
    x = sample((3, 20), torch.complex64)
    close(torch.fft.fft(x.to(DEV).conj()), torch.fft.fft(x.conj()))
    close(torch.fft.irfft(x.to(DEV).conj()), torch.fft.irfft(x.conj()))


def test_autograd_rfft_irfft(no_fallback):
    x = sample((3, 30), torch.float64)
    w = sample((3, 16), torch.complex128, seed=1)
    grads = []
    for dev in ("cpu", DEV):
        xd = x.detach().to(dev).requires_grad_()
        y = torch.fft.rfft(xd, norm="ortho")
        z = torch.fft.irfft(y * w.to(dev), n=30)
        (z * z).sum().backward()
        grads.append(xd.grad)
    close(grads[1], grads[0])


def test_autograd_through_conjugation(no_fallback):
    # ihfft2 / hfft conjugate their results (conj_physical): gradients flow
    x = sample((3, 4, 7), torch.float64)
    for fn in (torch.fft.ihfft2, torch.fft.ihfftn, lambda t: torch.fft.hfft(t.to(torch.complex128))):
        grads = []
        for dev in ("cpu", DEV):
            xd = x.detach().to(dev).requires_grad_()
            y = fn(xd)
            (y.abs() ** 2).sum().backward()
            grads.append(xd.grad)
        assert grads[1] is not None
        close(grads[1], grads[0])


def test_gradcheck_c2c(no_fallback):
    x = sample((2, 7), torch.complex128).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.fft.fft(t, norm="ortho").abs(), (x,))
    y = sample((2, 9), torch.float64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.fft.irfft(torch.fft.rfft(t), n=9), (y,))


def test_stft_istft(no_fallback):
    x = sample((2, 1000), torch.float32)
    win = torch.hann_window(128)
    kw = dict(n_fft=128, hop_length=32, window=None, return_complex=True)
    ref = torch.stft(x, **{**kw, "window": win})
    got = torch.stft(x.to(DEV), **{**kw, "window": win.to(DEV)})
    close(got, ref)
    back = torch.istft(got, n_fft=128, hop_length=32, window=win.to(DEV), length=1000)
    close(back, torch.istft(ref, n_fft=128, hop_length=32, window=win, length=1000))


def test_bad_input():
    with pytest.raises(NotImplementedError, match="_fft_c2c"):
        torch.ops.aten._fft_c2c(torch.ones(8, dtype=torch.int32, device=DEV), [0], 0, True)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.ones(8, dtype=torch.complex64, device=DEV), n=0)
    with pytest.raises(IndexError):
        torch.fft.fft(torch.ones(8, dtype=torch.complex64, device=DEV), dim=3)


OUTPUTS = r"""
import hashlib, torch, torch_loom


def outputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 360, dtype=torch.complex64, generator=g)
    r = torch.randn(33, 1009, generator=g)
    # long transforms (the four-step passes) and blocks of rows
    lx = torch.randn(2, 1 << 15, dtype=torch.complex64, generator=g)
    ly = torch.randn(40000, 3, dtype=torch.complex128, generator=g)
    lr = torch.randn(3, 48, 256, generator=g)
    lp = torch.randn(2, 97, 70, generator=g)  # partial panels, Bluestein columns
    fns = [lambda x, r: torch.fft.fft(x), lambda x, r: torch.fft.rfft(r),
           lambda x, r: torch.fft.irfft(torch.fft.rfft(r), n=1009),
           lambda x, r: torch.fft.fft2(x.real)]
    h = hashlib.sha256()
    for fn in fns:
        got, ref = fn(x.to("loom"), r.to("loom")).cpu(), fn(x, r)
        err = (got - ref).abs().max() / ref.abs().max()
        assert err < 2e-5, float(err)
        h.update(got.numpy().tobytes())
    for fn, t in ((torch.fft.fft, lx), (lambda t: torch.fft.ifft(t, dim=0), ly),
                  (torch.fft.rfft2, lr), (torch.fft.rfft2, lp)):
        got, ref = fn(t.to("loom")).cpu(), fn(t)
        err = (got - ref).abs().max() / ref.abs().max()
        assert err < 2e-5, float(err)
        h.update(got.numpy().tobytes())
    return h.hexdigest()
"""


def digest_in_subprocess(env):
    out = run_python(OUTPUTS + "\nprint('DIGEST', outputs())",
                     env={"LOOM_FALLBACK": "error", **env}).stdout
    return out.split("DIGEST")[1].split()[0]


def test_thread_count_independent(no_fallback):
    scope = {}
    exec(OUTPUTS, scope)
    # the children run the kernels this process runs (make test-generic, -guarded)
    same = {k: os.environ[k] for k in ("LOOM_CPU_FEATURES", "LOOM_DRIVER") if k in os.environ}
    mine = scope["outputs"]()
    for threads in ("1", "3"):
        assert digest_in_subprocess({"LOOM_NUM_THREADS": threads, **same}) == mine, threads


def test_generic_cpu_features():
    # the baseline build of the kernels against the CPU (inside the script)
    digest_in_subprocess({"LOOM_CPU_FEATURES": "generic"})
