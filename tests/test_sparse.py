"""Sparse tensors on loom: COO and compressed (CSR/CSC) tensors whose indices
and values live in loom memory, built, taken apart, moved and printed by
native loom ops; their compute ops native where loom has them and otherwise
on the counted CPU fallback; every result against the CPU's."""

import warnings

import pytest
import torch

DEV = "loom"


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        # The sparse invariant-check and CSR beta notices, and fallback warnings.
        warnings.simplefilter("ignore")
        yield


def _dense(shape=(6, 7), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    x[x.abs() < 0.8] = 0
    return (x * 4).round().to(dtype) if not dtype.is_floating_point else x.to(dtype)


def _uncoalesced():
    # Repeated and unordered indices, as an accumulation builds them.
    i = torch.tensor([[2, 0, 1, 2, 0, 3, 2], [1, 4, 0, 1, 4, 2, 3]])
    v = torch.tensor([1.5, -2.0, 0.25, 3.0, 1.0, -0.5, 2.0])
    return i, v, (4, 5)


def _on_loom(t):
    assert t.device.type == DEV, t.device


def _same_sparse(a, b):
    """a (loom) and b (CPU) are the same sparse tensor, layout and parts."""
    assert a.layout == b.layout and a.shape == b.shape and a.dtype == b.dtype
    if a.layout == torch.sparse_coo:
        for part in (a._indices(), a._values()):
            _on_loom(part)
        assert a.is_coalesced() == b.is_coalesced()
        torch.testing.assert_close(a._indices().cpu(), b._indices())
        torch.testing.assert_close(a._values().cpu(), b._values())
    else:
        if a.layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = (a.crow_indices(), a.col_indices(), a.values())
            ref = (b.crow_indices(), b.col_indices(), b.values())
        else:
            parts = (a.ccol_indices(), a.row_indices(), a.values())
            ref = (b.ccol_indices(), b.row_indices(), b.values())
        for p, r in zip(parts, ref):
            _on_loom(p)
            torch.testing.assert_close(p.cpu(), r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_to_sparse_and_back(dtype):
    x = _dense(dtype=dtype)
    s = x.to(DEV).to_sparse()
    _same_sparse(s, x.to_sparse())
    d = s.to_dense()
    _on_loom(d)
    torch.testing.assert_close(d.cpu(), x)
    assert s.sparse_dim() == 2 and s.dense_dim() == 0 and s._nnz() == int((x != 0).sum())
    # Hybrid: one sparse dimension, rows of values.
    h = x.to(DEV).to_sparse(1)
    _same_sparse(h, x.to_sparse(1))
    torch.testing.assert_close(h.to_dense().cpu(), x)


def test_factory_coalesce_and_structure(no_fallback):
    """Building a sparse tensor from loom indices and values and taking it
    apart are native loom ops (no_fallback: nothing ran on the CPU)."""
    i, v, size = _uncoalesced()
    s = torch.sparse_coo_tensor(i.to(DEV), v.to(DEV), size)
    _on_loom(s)
    assert s.layout == torch.sparse_coo and not s.is_coalesced()
    _same_sparse(s, torch.sparse_coo_tensor(i, v, size))
    s2 = torch.sparse_coo_tensor(i, v, size, device=DEV)
    _same_sparse(s2, torch.sparse_coo_tensor(i, v, size))
    assert s._nnz() == 7 and s.sparse_dim() == 2 and s.dense_dim() == 0
    e = torch.empty((3, 4), layout=torch.sparse_coo, device=DEV)
    assert e._nnz() == 0 and e.shape == (3, 4)
    _on_loom(e._indices())
    z = torch.zeros((3, 4), layout=torch.sparse_coo, device=DEV)
    assert z._nnz() == 0
    c = s.clone()
    _same_sparse(c, torch.sparse_coo_tensor(i, v, size))
    assert c._values().data_ptr() != s._values().data_ptr()


def test_coalesce_matches_cpu():
    i, v, size = _uncoalesced()
    ref = torch.sparse_coo_tensor(i, v, size).coalesce()
    got = torch.sparse_coo_tensor(i, v, size, device=DEV).coalesce()
    _same_sparse(got, ref)
    assert got.is_coalesced()
    torch.testing.assert_close(got.to_dense().cpu(), ref.to_dense())
    torch.testing.assert_close(
        torch.sparse_coo_tensor(i, v, size, device=DEV).to_dense().cpu(), ref.to_dense())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_coo_compute(no_fallback, dtype):
    """to_dense, coalesce, sparse @ dense and dense + sparse run on loom's
    kernels (no_fallback), with the CPU's results."""
    i, v, size = _uncoalesced()
    v = v.to(dtype)
    ref = torch.sparse_coo_tensor(i, v, size)
    s = torch.sparse_coo_tensor(i, v, size, device=DEV)
    torch.testing.assert_close(s.to_dense().cpu(), ref.to_dense())
    _same_sparse(s.coalesce(), ref.coalesce())
    # Three sparse dims and a dense one (hybrid).
    x = _dense((3, 4, 5, 2), dtype=dtype)
    _same_sparse(x.to_sparse(3).to(DEV).coalesce(), x.to_sparse(3).coalesce())
    torch.testing.assert_close(x.to_sparse(3).to(DEV).to_dense().cpu(), x)
    d = torch.randn(5, 3, dtype=dtype, generator=torch.Generator().manual_seed(4))
    t = torch.randn(4, 3, dtype=dtype, generator=torch.Generator().manual_seed(5))
    want = torch.sparse.mm(ref, d)
    for got in (torch.sparse.mm(s, d.to(DEV)), s @ d.to(DEV), torch.mm(s.coalesce(), d.to(DEV))):
        _on_loom(got)
        torch.testing.assert_close(got.cpu(), want)
    got = torch.addmm(t.to(DEV), s, d.to(DEV), beta=0.5, alpha=-1.5)
    torch.testing.assert_close(got.cpu(), torch.addmm(t, ref, d, beta=0.5, alpha=-1.5))
    got = torch.addmm(t[:1].to(DEV), s, d.to(DEV), beta=0)
    torch.testing.assert_close(got.cpu(), want)
    # CSR/CSC to dense, and CSR @ dense: rows (columns) from the pointers.
    x = _dense((6, 5), dtype=dtype)
    for c in (x.to_sparse_csr(), x.to_sparse_csc(), torch.zeros(3, 4, dtype=dtype).to_sparse_csr()):
        torch.testing.assert_close(c.to(DEV).to_dense().cpu(), c.to_dense())
    x = _dense((6, 5), dtype=dtype)
    c = x.to_sparse_csr()
    for got in (c.to(DEV) @ d.to(DEV), torch.mm(c.to(DEV), d.to(DEV))):
        torch.testing.assert_close(got.cpu(), x @ d)
    t6 = torch.randn(6, 3, dtype=dtype, generator=torch.Generator().manual_seed(7))
    got = torch.addmm(t6.to(DEV), c.to(DEV), d.to(DEV), beta=2.0, alpha=0.5)
    torch.testing.assert_close(got.cpu(), torch.addmm(t6, c, d, beta=2.0, alpha=0.5))
    # sparse_mask: the dense elements at the mask's (repeated, unordered) positions.
    xd = torch.randn(size, dtype=dtype, generator=torch.Generator().manual_seed(8))
    for mask in (ref, ref.coalesce()):
        _same_sparse(xd.to(DEV).sparse_mask(mask.to(DEV)), xd.sparse_mask(mask))
    xh = _dense((3, 4, 2), dtype=dtype)
    mh = xh.to_sparse(2)
    strided = xh.transpose(0, 2).contiguous().to(DEV).transpose(0, 2)
    _same_sparse(strided.sparse_mask(mh.to(DEV)), xh.sparse_mask(mh))
    base = torch.randn(size, dtype=dtype, generator=torch.Generator().manual_seed(6))
    acc = base.to(DEV)
    acc.add_(s, alpha=-0.5)
    torch.testing.assert_close(acc.cpu(), base.add(ref, alpha=-0.5))
    torch.testing.assert_close((base.to(DEV) + s).cpu(), base + ref)


def test_compressed_layouts():
    x = _dense((6, 8))
    xl = x.to(DEV)
    _same_sparse(xl.to_sparse_csr(), x.to_sparse_csr())
    _same_sparse(xl.to_sparse_csc(), x.to_sparse_csc())
    _same_sparse(xl.to_sparse_bsr((2, 2)), x.to_sparse_bsr((2, 2)))
    for t in (xl.to_sparse_csr(), xl.to_sparse_csc(), xl.to_sparse().to_sparse_csr()):
        torch.testing.assert_close(t.to_dense().cpu(), x)
    # From parts already on loom: native.
    ref = x.to_sparse_csr()
    with_parts = torch.sparse_csr_tensor(ref.crow_indices().to(DEV), ref.col_indices().to(DEV),
                                         ref.values().to(DEV), ref.shape)
    _same_sparse(with_parts, ref)
    _same_sparse(xl.to_sparse_csr().to_sparse(), x.to_sparse_csr().to_sparse())


def test_transfers_and_copy(no_fallback):
    x = _dense()
    for ref in (x.to_sparse(), x.to_sparse_csr(), x.to_sparse_csc()):
        s = ref.to(DEV)
        _same_sparse(s, ref)
        back = s.cpu()
        assert back.device.type == "cpu" and back.layout == ref.layout
        torch.testing.assert_close(back.to_dense(), x)
    # copy_ between CPU and loom sparse tensors, both ways.
    dst = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), x.shape,
                                  device=DEV)
    dst.copy_(x.to_sparse())
    _same_sparse(dst, x.to_sparse())
    cpu_dst = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), x.shape)
    cpu_dst.copy_(dst)
    torch.testing.assert_close(cpu_dst.to_dense(), x)
    csr = x.to_sparse_csr()
    csr_dst = torch.empty_like(csr.to(DEV))
    csr_dst.copy_(csr)
    _same_sparse(csr_dst, csr)


def test_products():
    x = _dense((6, 7))
    d = torch.randn(7, 5, generator=torch.Generator().manual_seed(1))
    t = torch.randn(6, 5, generator=torch.Generator().manual_seed(2))
    want = x @ d
    s, dl = x.to_sparse().to(DEV), d.to(DEV)
    for got in (torch.sparse.mm(s, dl), s @ dl, torch.mm(s, dl), x.to_sparse_csr().to(DEV) @ dl,
                torch.mm(x.to_sparse_csc().to(DEV), dl)):
        _on_loom(got)
        assert got.layout == torch.strided
        torch.testing.assert_close(got.cpu(), want)
    for sp in (s, x.to_sparse_csr().to(DEV)):
        got = torch.addmm(t.to(DEV), sp, dl, beta=0.5, alpha=2.0)
        torch.testing.assert_close(got.cpu(), torch.addmm(t, x.to_sparse(), d, beta=0.5, alpha=2.0))
    # Uncoalesced operand: repeated entries add up.
    i, v, size = _uncoalesced()
    d2 = torch.randn(5, 3, generator=torch.Generator().manual_seed(3))
    got = torch.sparse.mm(torch.sparse_coo_tensor(i, v, size, device=DEV), d2.to(DEV))
    torch.testing.assert_close(got.cpu(), torch.sparse.mm(torch.sparse_coo_tensor(i, v, size), d2))
    # Sparse x sparse, reductions, sampled products (on the CPU fallback).
    got = torch.sparse.mm(s, d.to_sparse().to(DEV))
    assert got.layout == torch.sparse_coo
    torch.testing.assert_close(got.to_dense().cpu(), want)
    csr = x.to_sparse_csr()
    for reduce in ("sum", "mean", "amax"):
        got = torch.sparse.mm(csr.to(DEV), dl, reduce)
        torch.testing.assert_close(got.cpu(), torch.sparse.mm(csr, d, reduce))
    # Their gradients: amax/amin record which entry won only when an input
    # requires grad (on the fallback's CPU copies too).
    for reduce in ("amax", "amin", "mean"):
        grads = []
        for dev in ("cpu", DEV):
            cs = csr.to(dev).detach().requires_grad_()
            dd = d.to(dev).detach().requires_grad_()
            torch.sparse.mm(cs, dd, reduce).sum().backward()
            grads.append((cs.grad.to_dense().cpu(), dd.grad.cpu()))
        torch.testing.assert_close(grads[1], grads[0])
    a, b = torch.randn(6, 3), torch.randn(3, 7)
    got = torch.sparse.sampled_addmm(csr.to(DEV), a.to(DEV), b.to(DEV))
    _same_sparse(got, torch.sparse.sampled_addmm(csr, a, b))


def test_sums():
    i, v, size = _uncoalesced()
    ref = torch.sparse_coo_tensor(i, v, size)
    s = torch.sparse_coo_tensor(i, v, size, device=DEV)
    torch.testing.assert_close(torch.sparse.sum(s).cpu(), torch.sparse.sum(ref))
    torch.testing.assert_close(s.sum().cpu(), ref.sum())
    for dim in (0, 1):
        got = torch.sparse.sum(s, dim=dim)
        _same_sparse(got, torch.sparse.sum(ref, dim=dim))
    x = _dense()
    torch.testing.assert_close(x.to_sparse_csr().to(DEV).sum().cpu(), x.sum())


def test_sum_of_all_values_is_native(no_fallback):
    x = _dense()
    torch.testing.assert_close(x.to_sparse().to(DEV).sum().cpu(), x.sum())
    torch.testing.assert_close(x.to_sparse_csr().to(DEV).sum().cpu(), x.sum())


def test_elementwise():
    x = _dense()
    y = _dense(seed=5)
    s, t = x.to_sparse().to(DEV), y.to_sparse().to(DEV)
    for got, want in ((s + t, x.to_sparse() + y.to_sparse()), (s * t, x.to_sparse() * y.to_sparse()),
                      (s * 2.5, x.to_sparse() * 2.5), (s.neg(), x.to_sparse().neg()),
                      (torch.sparse.log_softmax(s, 1), torch.sparse.log_softmax(x.to_sparse(), 1)),
                      (s.t(), x.to_sparse().t()),
                      (s.index_select(0, torch.tensor([4, 0, 2], device=DEV)),
                       x.to_sparse().index_select(0, torch.tensor([4, 0, 2])))):
        assert got.layout == torch.sparse_coo
        torch.testing.assert_close(got.to_dense().cpu(), want.to_dense())
    m = x.to(DEV).sparse_mask(t.coalesce())
    _same_sparse(m, x.sparse_mask(y.to_sparse().coalesce()))
    # In place on a sparse loom tensor: the result lands in its indices and values.
    u = x.to_sparse().to(DEV)
    u.mul_(3.0)
    torch.testing.assert_close(u.to_dense().cpu(), x * 3)
    u.add_(t)
    torch.testing.assert_close(u.to_dense().cpu(), x * 3 + y)
    dense = torch.ones(x.shape, device=DEV)
    dense.add_(s, alpha=-2.0)
    torch.testing.assert_close(dense.cpu(), torch.ones(x.shape) - 2 * x)


def test_compressed_elementwise_native(no_fallback):
    """Functions that keep zeros zero run on a compressed tensor's values
    with loom's dense kernels."""
    x = _dense().abs()
    c, ref = x.to_sparse_csr().to(DEV), x.to_sparse_csr()
    for f in (torch.neg, torch.sqrt, torch.tanh, torch.abs, torch.relu, lambda t: t * 2.0):
        _same_sparse(f(c), f(ref))
    c.neg_()
    _same_sparse(c, ref.neg())


def test_embedding_sparse_gradients_sgd(no_fallback):
    """nn.Embedding(sparse=True) trained with SGD: the gradients are sparse
    loom tensors and the parameters follow the CPU's."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Embedding(20, 6, sparse=True), torch.nn.Linear(6, 2))
    mod = torch.nn.Sequential(torch.nn.Embedding(20, 6, sparse=True), torch.nn.Linear(6, 2))
    mod.load_state_dict(ref.state_dict())
    mod.to(DEV)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.0)
    opt = torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.0)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        idx = torch.randint(0, 20, (8, 3), generator=g)
        tgt = torch.randn(8, 3, 2, generator=g)
        for m, o, dev in ((ref, opt_ref, "cpu"), (mod, opt, DEV)):
            o.zero_grad()
            loss = ((m(idx.to(dev)) - tgt.to(dev)) ** 2).mean()
            loss.backward()
            o.step()
        grad = mod[0].weight.grad
        assert grad.layout == torch.sparse_coo
        _on_loom(grad._indices())
        _on_loom(grad._values())
        torch.testing.assert_close(grad.to_dense().cpu(), ref[0].weight.grad.to_dense())
    for p, q in zip(mod.parameters(), ref.parameters()):
        _on_loom(p)
        torch.testing.assert_close(p.detach().cpu(), q.detach())


def test_printing():
    x = _dense((3, 4))
    text = str(x.to(DEV).to_sparse())
    assert "device='loom:0'" in text and "layout=torch.sparse_coo" in text
    assert str(x.to_sparse()._values()[:1].item())[:4] in text
    text = repr(x.to_sparse_csr().to(DEV))
    assert "crow_indices=" in text and "layout=torch.sparse_csr" in text


def test_fallback_is_counted_and_error_mode_names_the_op(loom):
    s = _dense().to_sparse().to(DEV)
    loom.set_fallback_mode("silent")
    loom.clear_fallback_ops()
    torch.sparse.log_softmax(s, 0)
    assert loom.fallback_ops().get("aten::_sparse_log_softmax") == 1, loom.fallback_ops()
    loom.set_fallback_mode("error")
    with pytest.raises(NotImplementedError, match=r"aten::_sparse_log_softmax.*loom"):
        torch.sparse.log_softmax(s, 0)
    c = _dense().to_sparse_csr().to(DEV)
    with pytest.raises(NotImplementedError, match=r"aten::_sparse_csr_sum.*LOOM_FALLBACK=error"):
        c.sum(dim=1, keepdim=True)


def test_unsupported_op_raises_clearly():
    s = _dense().to_sparse().to(DEV)
    with pytest.raises(NotImplementedError, match=r"aten::cumsum.*sparse COO.*loom"):
        torch.cumsum(s, 0)
    c = _dense().to_sparse_csr().to(DEV)
    with pytest.raises(NotImplementedError, match=r"aten::cumsum.*sparse compressed.*loom"):
        torch.cumsum(c, 0)
    # As on the CPU: a layout the op refuses.
    with pytest.raises(RuntimeError, match="SparseCsr"):
        c.pow(2)
    # Mixed devices are refused, not computed on the CPU.
    with pytest.raises(RuntimeError, match="same device"):
        torch.sparse.log_softmax(s, 0) + _dense().to_sparse()
    # The tensors still work afterwards.
    torch.testing.assert_close(s.to_dense().cpu(), _dense())


_LAYOUTS = {
    "dense": lambda t: t,
    "coo": lambda t: t.to_sparse(),
    "csr": lambda t: t.to_sparse_csr(),
    "csc": lambda t: t.to_sparse_csc(),
    "bsr": lambda t: t.to_sparse_bsr((2, 2)),
    "bsc": lambda t: t.to_sparse_bsc((2, 2)),
}


@pytest.mark.parametrize("src", list(_LAYOUTS))
def test_layout_conversions(src):
    """Every conversion the CPU makes between dense, COO and the compressed
    layouts gives the CPU's tensor on loom (the ones the CPU refuses are
    refused too)."""
    x = _dense((4, 6))
    for dst, conv in _LAYOUTS.items():
        if dst == "dense":
            continue
        try:
            want = conv(_LAYOUTS[src](x))
        except RuntimeError:
            with pytest.raises(RuntimeError):
                conv(_LAYOUTS[src](x).to(DEV))
            continue
        got = conv(_LAYOUTS[src](x).to(DEV))
        if want.layout in (torch.sparse_bsr, torch.sparse_bsc):
            assert got.layout == want.layout
            torch.testing.assert_close(got.values().cpu(), want.values())
        else:
            _same_sparse(got, want)
        torch.testing.assert_close(got.to_dense().cpu(), x)


def test_dense_to_coo_is_native(no_fallback):
    x = _dense((5, 3, 4))
    _same_sparse(x.to(DEV).to_sparse(), x.to_sparse())
    _same_sparse(x.to(DEV).to_sparse().coalesce(), x.to_sparse().coalesce())


def test_save_load_and_autograd(tmp_path):
    x = _dense((4, 5))
    for ref in (x.to_sparse(), x.to_sparse_csr()):
        torch.save(ref.to(DEV), tmp_path / "s.pt")
        _same_sparse(torch.load(tmp_path / "s.pt"), ref)
    # Gradients through to_dense and sparse @ dense: sparse, on loom, the CPU's.
    d = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
    grads = []
    for dev in ("cpu", DEV):
        s = x.to_sparse().to(dev).detach().requires_grad_()
        dd = d.to(dev).detach().requires_grad_()
        (torch.sparse.mm(s, dd).sum() + (s.to_dense() ** 2).sum()).backward()
        assert s.grad.layout == torch.sparse_coo and s.grad.device.type == dev
        grads.append((s.grad.to_dense().cpu(), dd.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])
