"""The loom device is found by `import torch` alone (entry point), and by
`import torch_loom` when autoload is off."""


def test_import_torch_alone_registers_loom(py):
    out = py(
        """
        import torch
        x = torch.ones(3, device="loom")
        assert x.device.type == "loom", x.device
        assert torch.device("loom").type == "loom"
        assert torch._C._get_privateuse1_backend_name() == "loom"
        assert torch.loom.is_available()
        assert hasattr(torch.Tensor, "loom") and x.is_loom
        print("sum", float(x.sum()))
        """
    ).stdout
    assert "sum 3.0" in out


def test_autoload_disabled_then_import_torch_loom(py):
    out = py(
        """
        import torch
        assert not hasattr(torch, "loom"), "autoload ran although disabled"
        import torch_loom
        assert torch.loom is torch_loom.loom
        x = torch.arange(4, device="loom")
        print(x.cpu().tolist())
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    ).stdout
    assert "[0, 1, 2, 3]" in out


def test_import_torch_loom_twice_is_harmless(py):
    py(
        """
        import importlib
        import torch, torch_loom
        importlib.reload(torch_loom)
        assert torch.ones(2, device="loom").sum().item() == 2
        """
    )


def test_import_torch_loom_before_torch(py):
    # `import torch_loom` first starts torch's autoload while torch_loom is
    # still being imported; the entry point must already be there.
    out = py(
        """
        import torch_loom
        import torch
        print(torch.ones(2, device="loom").sum().item())
        """
    ).stdout
    assert "2.0" in out
