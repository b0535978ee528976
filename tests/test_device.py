"""torch.loom device management, tensor creation and movement, and errors
for bad input."""

import copy

import pytest
import torch


def test_device_module_basics(loom):
    assert loom.device_count() >= 1
    loom.init()
    assert loom.is_initialized()
    assert loom.current_device() == 0
    name = loom.get_device_name()
    assert isinstance(name, str) and name
    props = loom.get_device_properties(0)
    assert props.total_memory > 0 and props.num_threads >= 1
    assert loom.get_device_capability() == (props.major, props.minor)
    assert loom.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert loom.is_bf16_supported()
    assert loom._is_in_bad_fork() is False
    loom.synchronize()


def test_roundtrip_all_dtypes(loom):
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                  torch.int8, torch.int16, torch.int32, torch.int64,
                  torch.uint8, torch.bool, torch.complex64, torch.complex128]:
        x = (torch.arange(24) % 7).to(dtype).reshape(2, 3, 4)
        y = x.to("loom")
        assert y.device == torch.device("loom", 0) and y.dtype == dtype
        assert torch.equal(y.cpu(), x), dtype


def test_copy_casts_and_strides_on_device(loom):
    x = torch.randn(5, 7, dtype=torch.float64)
    y = x.to("loom")
    # non-contiguous source, dtype change, all on the device
    z = y.t().to(torch.float32)
    assert z.device.type == "loom"
    torch.testing.assert_close(z.cpu(), x.t().to(torch.float32))
    # host -> device into a strided destination with a cast
    d = torch.zeros(7, 5, dtype=torch.float16, device="loom")
    d.t().copy_(x)
    torch.testing.assert_close(d.cpu(), x.t().to(torch.float16))
    # device -> host into a strided destination
    h = torch.zeros(7, 5, dtype=torch.float64)
    h.t().copy_(y)
    torch.testing.assert_close(h, x.t().contiguous().t().t())
    # broadcasting copy
    b = torch.empty(4, 3, device="loom")
    b.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert b.cpu().tolist() == [[1.0, 2.0, 3.0]] * 4
    # overlapping copy within one storage
    s = torch.arange(10, dtype=torch.float32, device="loom")
    s[1:].copy_(s[:-1].clone())
    assert s.cpu().tolist() == [0.0] + list(range(9))


def test_large_copies_stream_past_the_cache(loom):
    # Copies of 32 MiB and more write with non-temporal stores: the byte copy
    # of contiguous tensors (any alignment, head and tail included) and the
    # strided copy's contiguous runs.
    n = 8 * 1024 * 1024 + 33037
    x = torch.randn(n, generator=torch.Generator().manual_seed(4))
    d = x.to("loom")
    assert torch.equal(d.clone().cpu(), x)
    out = torch.zeros(n + 3, device="loom")
    out[3:].copy_(d)  # 12 bytes past a line boundary
    assert torch.equal(out.cpu(), torch.cat([torch.zeros(3), x]))
    rows = d[: 4112 * 2048].view(4112, 2048)[:, 1:2045]  # 32.06 MiB in rows of 2044
    assert torch.equal(rows.contiguous().cpu(), x[: 4112 * 2048].view(4112, 2048)[:, 1:2045])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_transposing_copies_move_tiles(loom, dtype):
    # A source that steps by one element down the destination's rows is
    # copied in tiles: whole tiles, partial tiles at the right and bottom
    # edges, and chunks of the launch that start and end mid-row.
    g = torch.Generator().manual_seed(6)
    for shape in [(1000, 333), (77, 5), (3, 300, 70)]:
        x = (torch.randn(shape, generator=g) * 100).to(dtype)
        d = x.to("loom")
        assert torch.equal(d.transpose(-1, -2).contiguous().cpu(), x.transpose(-1, -2).contiguous())
    img = (torch.randn(2, 19, 41, 23, generator=g) * 100).to(dtype)
    di = img.to("loom")
    assert torch.equal(di.permute(0, 2, 3, 1).contiguous().cpu(), img.permute(0, 2, 3, 1).contiguous())
    cl = di.contiguous(memory_format=torch.channels_last)
    assert torch.equal(cl.contiguous().cpu(), img)


@pytest.mark.parametrize("pair", [
    (torch.float32, torch.float64), (torch.float64, torch.float32), (torch.float32, torch.bool),
    (torch.float64, torch.bool), (torch.float32, torch.int64), (torch.float32, torch.int32),
    (torch.float64, torch.int64), (torch.int64, torch.float32), (torch.int32, torch.float32),
    (torch.uint8, torch.float32), (torch.bool, torch.float32), (torch.int64, torch.float64),
    (torch.int32, torch.int64), (torch.int64, torch.int32), (torch.uint8, torch.int64),
    (torch.bool, torch.int64), (torch.int64, torch.bool), (torch.int32, torch.bool),
    (torch.uint8, torch.bool), (torch.float16, torch.float32), (torch.float32, torch.float16),
    (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)],
    ids=lambda p: f"{p[0]}->{p[1]}".replace("torch.", ""))
def test_contiguous_casts_match_the_cpu_bitwise(loom, pair):
    # Contiguous runs between common dtypes take typed loops; strided ones
    # the general conversion: the same values either way (float to integer
    # within range: beyond it the value is the platform's).
    src, dst = pair
    g = torch.Generator().manual_seed(8)
    if src.is_floating_point:
        x = torch.randn(5003, generator=g, dtype=torch.float64) * 1e4
        x[:6] = torch.tensor([0.0, -0.0, 0.5, -2.5, 1e-30, 65519.0])
        if not dst.is_floating_point and dst != torch.bool:
            x = x.clamp(-2e9, 2e9)
        else:
            x[6:9] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        x = x.to(src)
    elif src == torch.bool:
        x = torch.rand(5003, generator=g) > 0.5
    else:
        hi = 255 if src == torch.uint8 else 2**31 - 1
        x = torch.randint(0 if src == torch.uint8 else -hi, hi, (5003,), generator=g, dtype=src)
        if src == torch.int64:
            x[:3] = torch.tensor([2**62 + 1, -(2**53) - 1, 2**31 + 5])
    d = x.to("loom")
    for got, want in ((d.to(dst), x.to(dst)), (d[::2].to(dst), x[::2].to(dst))):
        got = got.cpu()
        if dst.is_floating_point:
            nan = want.isnan()
            assert torch.equal(got.isnan(), nan)
            iv = {8: torch.int64, 4: torch.int32, 2: torch.int16}[want.element_size()]
            assert torch.equal(got[~nan].view(iv), want[~nan].view(iv))
        else:
            assert torch.equal(got, want)


def test_casts_between_float_widths_match_the_cpu_bitwise(loom):
    # rounding ties, NaN, inf, a subnormal, fp16's overflow edge; contiguous
    # runs and strided ones take different loops
    bits = torch.tensor([0x3f808000, 0x3f818000, 0x7f800001, 0xffc00001, 0x7f800000,
                         0x00000001, 0x477ff000, 0x3f7fffff], dtype=torch.int64)
    edge = bits.to(torch.int32).view(torch.float32)
    x = torch.cat([edge, torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 1e3])

    def same(a, b):  # bitwise, but any NaN for a NaN (the CPU's payloads vary by path)
        iview = {4: torch.int32, 2: torch.int16}[a.element_size()]
        nan = a.isnan()
        return torch.equal(nan, b.isnan()) and torch.equal(a[~nan].view(iview), b[~nan].view(iview))

    d = x.to("loom")
    for dtype in (torch.bfloat16, torch.float16):
        h = x.to(dtype)
        assert same(d.to(dtype).cpu(), h)
        assert same(d[::3].to(dtype).cpu(), h[::3])
        hd = h.to("loom")
        assert same(hd.float().cpu(), h.float())
        assert same(hd[::3].float().cpu(), h[::3].float())


def test_copies_resolve_conjugate_and_negative_views(loom):
    # Lazy conj / neg views on either side of a copy: the bytes move as they
    # are and the difference is applied to the destination (resolving on the
    # source would copy through the same path again, without end).
    c = torch.randn(3, 4, dtype=torch.complex64)
    assert torch.equal(c.conj().to("loom").cpu(), c.conj().resolve_conj())
    d = c.to("loom")
    assert torch.equal(d.conj().cpu(), c.conj())
    assert torch.equal(d.conj().clone().cpu(), c.conj())
    e = torch.empty(3, 4, dtype=torch.complex64, device="loom")
    e.copy_(d.conj())
    assert torch.equal(e.cpu(), c.conj())
    r = torch.randn(5)
    assert torch.equal(torch._neg_view(r).to("loom").cpu(), -r)
    assert torch.equal(torch._neg_view(r.to("loom")).clone().cpu(), -r)
    # Complex results computed on the host come back through these copies.
    x = torch.randn(8)
    torch.testing.assert_close(torch.fft.ifft(x.to("loom")).cpu(), torch.fft.ifft(x))
    torch.testing.assert_close(torch.fft.ihfft(x.to("loom")).cpu(), torch.fft.ihfft(x))


def test_fill_zero_and_item(loom):
    x = torch.empty(3, 4, dtype=torch.int32, device="loom")
    x.fill_(7)
    assert x.cpu().tolist() == [[7] * 4] * 3
    x.zero_()
    assert x.cpu().sum().item() == 0
    c = torch.empty(2, dtype=torch.complex64, device="loom").fill_(1 + 2j)
    assert c.cpu().tolist() == [1 + 2j, 1 + 2j]
    v = torch.tensor(3.5, device="loom")
    f = torch.empty(2, 2, device="loom").fill_(v)
    assert f.cpu().tolist() == [[3.5, 3.5], [3.5, 3.5]]
    assert torch.tensor([2.25], device="loom").item() == 2.25
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.empty(2, dtype=torch.uint8, device="loom").fill_(300)
    with pytest.raises(RuntimeError, match="0-dimension"):
        f.fill_(torch.ones(2))


def test_views_resize_and_set(loom):
    x = torch.arange(12, dtype=torch.float32, device="loom")
    v = x.view(3, 4)[1:, ::2]
    assert v.cpu().tolist() == [[4.0, 6.0], [8.0, 10.0]]
    assert x.reshape(4, 3).t().contiguous().cpu().tolist() == torch.arange(12.0).reshape(4, 3).t().tolist()
    r = torch.arange(4, dtype=torch.float32, device="loom")
    r.resize_(2, 5)  # grows the storage, keeps the old contents
    assert r.cpu().flatten()[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    s = torch.empty(0, device="loom")
    s.set_(x.untyped_storage(), 2, (2, 2), (4, 1))
    assert s.cpu().tolist() == [[2.0, 3.0], [6.0, 7.0]]
    t = torch.empty(0, device="loom").set_(x)
    assert t.data_ptr() == x.data_ptr()
    e = torch.ones(3, device="loom").set_()
    assert e.numel() == 0 and e.device.type == "loom"
    st = torch.UntypedStorage(16, device="loom")
    st.resize_(32)
    assert st.nbytes() == 32 and st.device.type == "loom"


def test_device_context_and_set_device(loom):
    with loom.device(0):
        assert loom.current_device() == 0
    loom.set_device("loom:0")
    assert torch.accelerator.current_device_index() == 0


def test_invalid_device_index_is_a_clear_error(loom):
    n = loom.device_count()
    with pytest.raises(RuntimeError, match=f"loom:{n + 4}"):
        torch.empty(2, device=f"loom:{n + 4}")
    with pytest.raises(RuntimeError, match=f"loom:{n}"):
        torch.ones(2).to(f"loom:{n}")
    with pytest.raises(RuntimeError, match=f"loom:{n + 1}"):
        loom.set_device(n + 1)


def test_negative_sizes_match_cpu_error(loom):
    with pytest.raises(RuntimeError) as cpu_err:
        torch.empty(2, -1)
    with pytest.raises(RuntimeError) as loom_err:
        torch.empty(2, -1, device="loom")
    assert str(loom_err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match="negative"):
        torch.empty_strided((2, -3), (1, 1), device="loom")


def test_cpu_tensor_where_loom_is_needed(loom):
    a = torch.ones(3, device="loom")
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(a, torch.ones(3))
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([a, torch.ones(3)])
    # a zero-dim CPU tensor is a scalar and is allowed, as on CUDA
    assert (a * torch.tensor(2.0)).cpu().tolist() == [2.0, 2.0, 2.0]


def test_pinned_flag_on_empty_is_rejected(loom):
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(2, device="loom", pin_memory=True)


def test_module_to_loom_and_back(loom):
    m = torch.nn.Linear(4, 2)
    m2 = copy.deepcopy(m).to("loom")
    assert m2.weight.device.type == "loom" and m2.weight.is_loom
    x = torch.randn(3, 4)
    torch.testing.assert_close(m2(x.loom()).cpu(), m(x))
    assert torch.Tensor.loom(x).device.type == "loom"


def test_forked_child_refuses_loom(py):
    out = py(
        """
        import os, torch
        x = torch.ones(2, device="loom")
        pid = os.fork()
        if pid == 0:
            ok = torch.loom._is_in_bad_fork()
            try:
                torch.ones(2, device="loom")
                ok = False
            except RuntimeError as e:
                ok = ok and "forked" in str(e)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), "parent", x.sum().item())
        """
    ).stdout
    assert "child 0 parent 2.0" in out


def test_exit_right_after_backward_is_clean(py):
    # On one core the autograd device thread often drops the finished graph
    # (and the gradients' Python objects) only after the script has ended;
    # without the atexit drain about 4 runs in 10 abort with SIGABRT.
    script = """
        import os
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        import torch
        xs = [torch.randn(4, device="loom", requires_grad=True) for _ in range(200)]
        gs = torch.autograd.grad(sum((x * x).sum() for x in xs), xs)
        """
    for _ in range(8):
        proc = py(script, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
