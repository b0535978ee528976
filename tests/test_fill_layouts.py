"""fill_ and zero_ on tensors that are not contiguous: a dense tensor in
another dimension order (channels last, a permuted view) is filled as the
one run of memory it is, and a view that is not dense (a slice, an
expanded view whose rows share memory) writes only its own elements; the
values and the strides are the CPU's."""
import pytest
import torch

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]

CL = torch.channels_last

VIEWS = {
    "channels_last": lambda b: b,
    "permuted": lambda b: b.permute(2, 0, 3, 1),
    "channels_last_every_other_column": lambda b: b[:, :, :, ::2],
    "channels_last_first_channels": lambda b: b[:, :5],
    "channels_last_one_image": lambda b: b[1],
    "expanded_rows": lambda b: b[:, :, :1].expand(-1, -1, 4, -1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
@pytest.mark.parametrize("view", list(VIEWS))
def test_fill_and_zero_write_only_the_views_elements(view, dtype):
    base = (torch.arange(3 * 7 * 6 * 9) % 11 + 1).reshape(3, 7, 6, 9)
    base = base.to(dtype).contiguous(memory_format=CL)
    got = {}
    for dev in ("cpu", "loom"):
        b = base.to(dev)
        v = VIEWS[view](b)
        v.fill_(2)
        first = b.cpu().clone()
        v.zero_()
        got[dev] = (first, b.cpu(), v.stride(), b.stride())
    for c, l in zip(got["cpu"], got["loom"]):
        if isinstance(c, torch.Tensor):
            assert torch.equal(l, c)
        else:
            assert l == c
