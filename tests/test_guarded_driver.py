"""LOOM_DRIVER=guarded: device memory the host cannot dereference. What
PyTorch code does with loom tensors works there as on the host driver,
since nothing above the HAL reads device memory but through HAL copies; a
host dereference of a device address kills the process with a message
naming the bug."""

import signal

GUARDED = {"LOOM_DRIVER": "guarded", "LOOM_FALLBACK": "silent"}


def test_device_reports_the_guarded_driver(py):
    proc = py("""
        import torch
        print(torch.loom.get_device_name())
        print(torch.loom.get_device_properties(0))
    """, env=GUARDED)
    assert proc.stdout.startswith("loom guarded")


def test_training_matches_the_cpu(py):
    proc = py("""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
        twin = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                   torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
        twin.load_state_dict(model.state_dict())
        model.to("loom")
        x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, twin)]
        for step in range(5):
            for m, opt, dev in ((model, opts[0], "loom"), (twin, opts[1], "cpu")):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)
        print("loss", loss.item())
    """, env=GUARDED)
    assert "loss" in proc.stdout


def test_host_reads_go_through_copies(py):
    proc = py("""
        import io
        import torch
        x = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 4.25]], device="loom")
        text = repr(x)
        assert "1.5000" in text and "4.2500" in text and "loom" in text, text
        assert x[1, 2].item() == 4.25
        assert x.tolist() == [[0.0, 1.5, -2.0], [3.0, 0.0, 4.25]]
        assert bool(x.sum() > 0) and float(x.max()) == 4.25 and int(x.argmax()) == 5
        assert torch.nonzero(x).cpu().tolist() == [[0, 1], [0, 2], [1, 0], [1, 2]]
        assert x[x > 0].cpu().tolist() == [1.5, 3.0, 4.25]
        assert torch.masked_select(x, x < 0).cpu().tolist() == [-2.0]
        assert torch.unique(torch.tensor([3, 1, 3, 2], device="loom")).cpu().tolist() == [1, 2, 3]
        assert torch.equal(x, x.clone()) and torch.allclose(x, x + 1e-9)
        assert x.ne(0).any() and not x.isnan().any()
        # The CPU fallback copies its operands out and its results back.
        torch.loom.clear_fallback_ops()
        a, b = (x.abs() * 4).long() + 6, (x.abs() * 2).long() + 4
        f = torch.gcd(a, b)
        assert torch.equal(f.cpu(), torch.gcd(a.cpu(), b.cpu()))
        assert torch.loom.fallback_ops(), "no op fell back: pick another fallback op"
        # Fills, copies between devices, pinned memory, serialization.
        z = torch.full((1000,), 7.0, device="loom"); z[10:20] = 1.0; z.fill_(2.0)
        p = torch.arange(6.0).pin_memory().to("loom", non_blocking=True)
        assert p.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        buf = io.BytesIO(); torch.save({"x": x}, buf); buf.seek(0)
        back = torch.load(buf)["x"]
        assert back.device.type == "loom" and torch.equal(back.cpu(), x.cpu())
        print("ok", x.numel())
    """, env=GUARDED)
    assert proc.stdout.strip() == "ok 6"


def test_host_dereference_crashes_with_a_message(py):
    proc = py("""
        import ctypes
        import torch
        t = torch.arange(8.0, device="loom")
        torch.loom.synchronize()
        print(hex(t.data_ptr()), flush=True)
        ctypes.c_float.from_address(t.data_ptr() + 4).value  # a host read of device memory
        print("survived", flush=True)
    """, env=GUARDED, check=False)
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr)
    assert "survived" not in proc.stdout
    address = hex(int(proc.stdout.split()[0], 16) + 4)
    assert (f"loom guarded driver: host code touched device memory at {address} "
            "(a device buffer; read it through a HAL copy)") in proc.stderr


def test_the_host_driver_lets_the_same_read_through(py):
    """Why the guarded driver exists: on the host driver, device memory is
    host memory and the bug goes unnoticed."""
    proc = py("""
        import ctypes
        import torch
        t = torch.arange(8.0, device="loom")
        torch.loom.synchronize()
        print(ctypes.c_float.from_address(t.data_ptr() + 4).value)
    """, env={"LOOM_DRIVER": "host"})
    assert proc.stdout.strip() == "1.0"
