"""The CPU fallback: ops without a loom kernel still run, are recorded, warn
once, and can be forbidden with LOOM_FALLBACK=error."""

import warnings

import pytest
import torch

# An op that stays without a native loom kernel (the greatest common
# divisor of integers).
FALLBACK_OP = "gcd"


def _fallback_call(x):
    return torch.gcd(x.long(), (2 * x).long() + 2)


def _count(ops):
    return sum(v for k, v in ops.items() if k.startswith("aten::" + FALLBACK_OP))


def test_fallback_runs_and_is_recorded(loom):
    loom.set_fallback_mode("silent")
    loom.clear_fallback_ops()
    x = torch.tensor([2.0, 3.0, 4.0], device="loom")
    y = _fallback_call(x)
    assert y.device.type == "loom"
    torch.testing.assert_close(y.cpu(), _fallback_call(x.cpu()))
    _fallback_call(x)
    ops = loom.fallback_ops()
    assert _count(ops) == 2, ops


def test_fallback_warns_once_per_op(loom):
    old = loom.get_fallback_mode()
    loom.set_fallback_mode("warn")
    loom.clear_fallback_ops()
    try:
        x = torch.tensor([2.0, 3.0], device="loom")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _fallback_call(x)
            _fallback_call(x)
        msgs = [str(w.message) for w in caught if FALLBACK_OP in str(w.message)]
        assert len(msgs) == 1, msgs
        assert "CPU" in msgs[0]
    finally:
        loom.set_fallback_mode(old)


def test_fallback_silent_mode(loom):
    old = loom.get_fallback_mode()
    loom.set_fallback_mode("silent")
    loom.clear_fallback_ops()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _fallback_call(torch.tensor([2.0], device="loom"))
        assert not [w for w in caught if FALLBACK_OP in str(w.message)]
        assert _count(loom.fallback_ops()) == 1
    finally:
        loom.set_fallback_mode(old)


def test_fallback_error_mode_from_env(py):
    out = py(
        """
        import torch
        x = torch.tensor([2.0, 3.0], device="loom")
        try:
            torch.gcd(x.long(), x.long())
        except NotImplementedError as e:
            assert "aten::gcd" in str(e), e
            print("raised")
        assert torch.loom.get_fallback_mode() == "error"
        """,
        env={"LOOM_FALLBACK": "error"},
    ).stdout
    assert "raised" in out


def test_bad_mode_rejected(loom):
    with pytest.raises(ValueError):
        loom.set_fallback_mode("sometimes")
