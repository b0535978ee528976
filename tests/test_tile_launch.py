"""The native launch of cached torch_loom.tile kernels
(csrc/python/tile_launch.cpp): a cached specialisation launches without
Python's launch path, and every change of what a kernel is specialised on
(tensor dtype, 16-byte alignment, an int equal to 1 or past int32, a
constexpr, two tensors sharing memory) reaches a specialisation of its own
instead of the one cached before; bindings by keyword, defaults, launch
options and callable grids give the same launches; launch errors name the
kernel; the interpreter still runs when LOOM_TILE_INTERPRET is set."""

import pytest
import torch

import torch_loom  # noqa: F401
import torch_loom.tile as tl


def _kernel():
    @tl.jit
    def scale8(X, Y, n, BLOCK: tl.constexpr, LIMIT: tl.constexpr = 8):
        offs = tl.arange(0, BLOCK)
        m = offs < LIMIT
        tl.store(Y + offs, tl.load(X + offs, mask=m) * n, mask=m)

    return scale8


class _Counted:
    """Counts the launches that take the Python path (JITFunction._launch:
    a new specialisation, the interpreter, Python's binding)."""

    def __init__(self, kernel, monkeypatch):
        self.calls = 0
        original = kernel._launch

        def launch(grid, args, kwargs):
            self.calls += 1
            return original(grid, args, kwargs)

        monkeypatch.setattr(kernel, "_launch", launch)


_scale = None


def _run(x, n, block=8, y=None, **kw):
    y = torch.full_like(x, -1) if y is None else y
    _scale[(1,)](x, y, n, BLOCK=block, **kw)
    return y


@pytest.fixture
def counted(monkeypatch):
    """A new kernel (no specialisation cached in this process; the JIT's
    disk cache keeps its compiles cheap) and its count of Python launches."""
    global _scale
    monkeypatch.delenv("LOOM_TILE_INTERPRET", raising=False)
    _scale = _kernel()
    return _Counted(_scale, monkeypatch)


def test_cached_launch_skips_python(counted):
    x = torch.arange(8.0).to("loom")
    torch.testing.assert_close(_run(x, 3).cpu(), torch.arange(8.0) * 3)
    assert counted.calls == 1  # traced and compiled
    for n in (5, -2, 1 << 20):  # ints of one kind: one specialisation
        torch.testing.assert_close(_run(x, n).cpu(), torch.arange(8.0) * n)
    assert counted.calls == 1 and len(_scale._cache) == 1


def test_each_specialisation_change_respecialises(counted):
    base = torch.arange(8.0)
    x = base.to("loom")
    _run(x, 3)
    seen = 1

    def check(out, want, new):
        nonlocal seen
        torch.testing.assert_close(out.cpu(), want, rtol=0, atol=0)
        seen += new
        assert counted.calls == seen and len(_scale._cache) == seen

    # n == 1 is a constant of its own specialisation; n == 7 after it must
    # not reuse it (it would store x * 1)
    check(_run(x, 1), base, 1)
    check(_run(x, 7), base * 7, 0)
    check(_run(x, 2 ** 40), base * 2 ** 40, 1)  # past int32: an int64 argument
    # another dtype: the float kernel would read the ints' bits as floats
    ints = torch.arange(8, dtype=torch.int32) + (1 << 26)  # normal floats' bits
    xi = ints.to("loom")
    check(_run(xi, 3), ints * 3, 1)
    check(_run(xi.double(), 3), ints.double() * 3, 1)
    # another constexpr: a block of 4 stores half the elements
    out = _run(x, 3, block=4, LIMIT=4)
    check(out, torch.cat([base[:4] * 3, torch.full((4,), -1.0)]), 1)
    check(_run(x, 3, block=8, LIMIT=4), torch.cat([base[:4] * 3, torch.full((4,), -1.0)]), 1)
    # data not 16-byte aligned
    buf = torch.arange(9.0).to("loom")
    check(_run(buf[1:], 3), torch.arange(1.0, 9.0) * 3, 1)
    # the output is the input: loads may not read in place
    y = torch.arange(8.0).to("loom")
    check(_run(y, 2, y=y), base * 2, 1)
    check(_run(y, 2, y=y), base * 4, 0)
    # back to the first: found again, not compiled
    check(_run(x, 3), base * 3, 0)


def test_bindings_grids_and_options(counted):
    base = torch.arange(8.0)
    x = base.to("loom")
    _run(x, 3)
    y = torch.empty_like(x)
    _scale[(1,)](x, y, n=4, BLOCK=8)
    torch.testing.assert_close(y.cpu(), base * 4)
    _scale[(1,)](x, Y=y, BLOCK=8, n=5, num_warps=4, num_stages=2)  # keywords in any order, options
    torch.testing.assert_close(y.cpu(), base * 5)
    _scale[1](x, y, 6, 8, 8)  # an int grid; the default given
    torch.testing.assert_close(y.cpu(), base * 6)
    _scale[lambda meta: (meta["BLOCK"] // 8,)](x, y, 7, BLOCK=8, num_warps=2)
    torch.testing.assert_close(y.cpu(), base * 7)
    _scale[[1, 1, 1]](x, y, 8, BLOCK=8)
    torch.testing.assert_close(y.cpu(), base * 8)
    assert counted.calls == 1
    _scale[(0,)](x, y, 9, BLOCK=8)  # an empty grid launches nothing
    torch.testing.assert_close(y.cpu(), base * 8)
    # what the native launch leaves to Python raises as before
    with pytest.raises(TypeError, match="missing argument 'n'"):
        _scale[(1,)](x, y, BLOCK=8)
    with pytest.raises(ValueError, match="the grid must be"):
        _scale[(1, -1)](x, y, 3, BLOCK=8)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        _scale[(1,)](x, y, 3, 8, 8, 9)


def test_launch_errors_name_the_kernel(counted):
    x = torch.arange(8.0).to("loom")
    _run(x, 3)
    with pytest.raises(RuntimeError, match=r"loom_tile_scale8_\w+: expected a tensor on loom"):
        _run(x, 3, y=torch.empty(8))  # same key as the cached launch, on the CPU
    with pytest.raises(tl.TileCompileError, match=r"test_tile_launch\.py:\d+: .*power of 2.*\n +offs = tl\.arange"):
        _run(x, 3, block=6)  # arange of a length not a power of two


def test_interpreter_and_source_use_the_same_keys(counted, monkeypatch):
    x = torch.arange(8.0).to("loom")
    _run(x, 3)
    monkeypatch.setenv("LOOM_TILE_INTERPRET", "1")
    torch.testing.assert_close(_run(x, 5).cpu(), torch.arange(8.0) * 5)
    assert counted.calls == 2  # the interpreter runs through Python
    monkeypatch.setenv("LOOM_TILE_INTERPRET", "0")
    torch.testing.assert_close(_run(x, 5).cpu(), torch.arange(8.0) * 5)
    assert counted.calls == 2
    y = torch.empty_like(x)
    assert _scale.source(x, y, 3, BLOCK=8) == next(iter(_scale._cache.values())).source
    assert len(_scale._cache) == 1
