"""torch.save / torch.load of loom tensors, storages and modules."""

import io

import torch


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_tensor_roundtrip_stays_on_loom(loom):
    x = torch.randn(3, 4).to("loom")
    y = _roundtrip(x)
    assert y.device == x.device
    assert torch.equal(y.cpu(), x.cpu())


def test_views_share_storage_after_load(loom):
    x = torch.arange(10.0, device="loom")
    a, b = _roundtrip([x, x[2:5]])
    a[3] = 100.0
    assert b[1].item() == 100.0


def test_map_location(loom):
    x = torch.randn(5).to("loom")
    y = _roundtrip(x, map_location="cpu")
    assert y.device.type == "cpu" and torch.equal(y, x.cpu())
    z = _roundtrip(x.cpu(), map_location="loom")
    assert z.device.type == "loom" and torch.equal(z.cpu(), x.cpu())


def test_storage_roundtrip(loom):
    s = torch.arange(6, dtype=torch.int32, device="loom").untyped_storage()
    t = _roundtrip(s)
    assert t.device.type == "loom" and t.nbytes() == s.nbytes()
    assert bytes(t.cpu()) == bytes(s.cpu())


def test_module_state_dict(loom):
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("loom")
    sd = _roundtrip(m.state_dict())
    assert all(v.device.type == "loom" for v in sd.values())
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    m2.load_state_dict(_roundtrip(m.state_dict(), map_location="cpu"))
    x = torch.randn(3, 4)
    torch.testing.assert_close(m2(x), m(x.to("loom")).cpu())
    whole = _roundtrip(m, weights_only=False)
    assert next(whole.parameters()).device.type == "loom"
