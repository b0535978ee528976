"""Two simulated devices (LOOM_NUM_DEVICES=2): separate memory and stats,
copies between them, per-device streams."""

import pytest


def test_two_devices(py):
    out = py(
        """
        import torch
        loom = torch.loom
        assert loom.device_count() == 2, loom.device_count()
        assert torch.accelerator.device_count() == 2
        a = torch.arange(1 << 18, dtype=torch.float32, device="loom:0")
        before1 = loom.memory_allocated(1)
        b = torch.empty(1 << 18, dtype=torch.float32, device="loom:1")
        assert loom.memory_allocated(1) == before1 + (1 << 20)
        assert loom.memory_allocated(0) >= 1 << 20
        b.copy_(a)
        assert b.device == torch.device("loom", 1)
        assert torch.equal(b.cpu(), a.cpu())
        c = a.to("loom:1", dtype=torch.float64)
        assert torch.equal(c.cpu(), a.cpu().double())
        d = b[::2].to("loom:0")
        assert d.device.index == 0 and torch.equal(d.cpu(), a.cpu()[::2])
        with loom.device(1):
            assert loom.current_device() == 1
            e = torch.ones(4, device="loom")
            assert e.device.index == 1
            s = loom.Stream()
            assert s.device_index == 1
        assert loom.current_device() == 0
        assert loom.current_stream(1).device_index == 1
        loom.set_device(1)
        assert torch.accelerator.current_device_index() == 1
        loom.set_device(0)
        # cross-device copy ordered after pending work on the source
        s0 = loom.Stream(device=0)
        big = torch.empty(1 << 24, device="loom:0")
        with loom.stream(s0):
            big.fill_(9.0)
        dst = torch.empty(1 << 24, device="loom:1")
        with loom.stream(s0):
            dst.copy_(big)
        assert dst[-2:].cpu().tolist() == [9.0, 9.0]
        g0 = torch.Generator(device="loom:0").manual_seed(1)
        g1 = torch.Generator(device="loom:1").manual_seed(1)
        r0 = torch.rand(8, device="loom:0", generator=g0)
        r1 = torch.rand(8, device="loom:1", generator=g1)
        assert torch.equal(r0.cpu(), r1.cpu())
        loom.synchronize(1)
        print("ok", loom.get_device_properties(1).index)
        """,
        env={"LOOM_NUM_DEVICES": "2"},
    ).stdout
    assert "ok 1" in out


@pytest.mark.xfail(reason="c10's copy-on-write materialisation allocates on the "
                   "current device; loom kernels get no device guard, so the copy "
                   "lands on loom:0 for a loom:1 tensor", strict=False)
def test_copy_on_write_on_the_non_current_device(py):
    out = py(
        """
        import torch
        w = torch.arange(8.0, device="loom:1")
        v = torch._lazy_clone(w)
        v.add_(1)
        assert w.cpu().tolist() == list(map(float, range(8)))
        assert v.cpu().tolist() == list(map(float, range(1, 9)))
        assert v.untyped_storage().data_ptr() != w.untyped_storage().data_ptr()
        print("ok")
        """,
        env={"LOOM_NUM_DEVICES": "2"},
    ).stdout
    assert "ok" in out


def test_invalid_index_with_two_devices(py):
    py(
        """
        import torch
        try:
            torch.empty(2, device="loom:2")
        except RuntimeError as e:
            assert "loom:2" in str(e), e
        else:
            raise SystemExit("no error")
        """,
        env={"LOOM_NUM_DEVICES": "2"},
    )
