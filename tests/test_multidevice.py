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


def test_copy_on_write_on_the_non_current_device(py):
    # c10 materialises a lazy clone on the current device; the kernel's
    # device guard must make that loom:1, not loom:0.
    out = py(
        """
        import torch
        loom = torch.loom
        w = torch.arange(8.0, device="loom:1")
        v = torch._lazy_clone(w)
        v.add_(1)
        assert w.cpu().tolist() == list(map(float, range(8)))
        assert v.cpu().tolist() == list(map(float, range(1, 9)))
        assert v.untyped_storage().data_ptr() != w.untyped_storage().data_ptr()
        assert loom.memory_allocated(0) == 0, loom.memory_allocated(0)
        assert loom.memory_allocated(1) >= 2 * 8 * 4
        assert loom.current_device() == 0
        print("ok")
        """,
        env={"LOOM_NUM_DEVICES": "2"},
    ).stdout
    assert "ok" in out


def test_ops_on_the_non_current_device(py):
    # With loom:0 current, ops on loom:1 operands allocate, run and leave
    # their results on loom:1, and the current device stays loom:0.
    out = py(
        """
        import torch
        loom = torch.loom
        torch.manual_seed(0)
        a_cpu, b_cpu = torch.randn(16, 8), torch.randn(8, 4)
        a, b = a_cpu.to("loom:1"), b_cpu.to("loom:1")
        assert loom.current_device() == 0
        results = {
            "add": (a + 1.5, a_cpu + 1.5),
            "mul_": (a.clone().mul_(a), a_cpu.clone().mul_(a_cpu)),
            # writing to a lazy clone copies its storage on the current device
            "lazy_clone.mul_": (torch._lazy_clone(a).mul_(2), a_cpu * 2),
            "lazy_clone.exp_": (torch._lazy_clone(a).exp_(), a_cpu.exp()),
            "lazy_clone.index_fill_": (
                torch._lazy_clone(a).index_fill_(0, torch.tensor([1], device="loom:1"), 0.0),
                a_cpu.index_fill(0, torch.tensor([1]), 0.0)),
            "sum": (a.sum(dim=0), a_cpu.sum(dim=0)),
            "amax": (a.amax(), a_cpu.amax()),
            "mm": (a @ b, a_cpu @ b_cpu),
            "softmax": (a.softmax(-1), a_cpu.softmax(-1)),
            "index_select": (a.index_select(0, torch.tensor([3, 1], device="loom:1")),
                             a_cpu.index_select(0, torch.tensor([3, 1]))),
            "zeros_like": (torch.zeros_like(a), torch.zeros_like(a_cpu)),
            "full_like": (torch.full_like(a, 2.0), torch.full_like(a_cpu, 2.0)),
            "rand_like": (torch.rand_like(a), None),
        }
        loom.synchronize(1)
        for name, (got, want) in results.items():
            assert got.device == torch.device("loom", 1), (name, got.device)
            if want is not None:
                torch.testing.assert_close(got.cpu(), want, msg=name)
        assert loom.memory_allocated(0) == 0, loom.memory_allocated(0)
        assert loom.current_device() == 0
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
