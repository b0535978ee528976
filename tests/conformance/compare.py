"""Run one (OpInfo, dtype) on a device and on the CPU and classify the result.

The samples come from the OpInfo, generated on the CPU. Each variant (forward,
gradient, in-place, out=) runs on a fresh exact copy of the sample: on the CPU
for the reference and on the device under test, where tensors keep their sizes,
strides and storage offset so that non-contiguous samples stay non-contiguous.

Outcome of one check:
  pass   equal within the OpInfo's tolerances, or both sides raised
  fail   the device returned a wrong result (or a result where the CPU raised)
  error  the device raised where the CPU succeeded
The item is classified by its worst check (fail > error), then by whether any
ATen op fell back to the CPU during the device runs (fallback vs native).
"""

import contextlib
import itertools
import os
import time
import traceback

import torch
from torch.utils._pytree import tree_leaves, tree_map

from . import catalog

FAULT_ENV = "LOOM_CONFORMANCE_FAULT"
MESSAGE_CHARS = 400


# --------------------------------------------------------------------------
# Copies


def copy_tensor(t, device):
    """An exact copy of `t` on `device`: same sizes, strides, storage offset
    pattern and requires_grad (as a fresh leaf)."""
    with torch.no_grad():
        if t.layout != torch.strided or t.is_quantized or t.numel() == 0:
            out = t.detach().to(device, copy=True)
        else:
            # The storage span the view touches, starting at its offset.
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            flat = t.detach().as_strided((span,), (1,))
            base = flat.to(device, copy=True)
            out = base.as_strided(t.shape, t.stride(), 0)
        out = out.detach()
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def copy_to(obj, device):
    """Deep copy of a sample structure, moving tensors and device arguments."""
    if isinstance(obj, torch.Tensor):
        return copy_tensor(obj, device)
    if isinstance(obj, torch.device):
        return torch.device(device) if obj.type == "cpu" else obj
    if type(obj) in (list, tuple):
        return type(obj)(copy_to(x, device) for x in obj)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "device" and isinstance(v, str) and v == "cpu":
                out[k] = device
            else:
                out[k] = copy_to(v, device)
        return out
    return obj


def copy_sample(sample, device):
    return (
        copy_to(sample.input, device),
        copy_to(sample.args, device),
        copy_to(sample.kwargs, device),
    )


def to_cpu(obj):
    return tree_map(
        lambda t: t.detach().to("cpu") if isinstance(t, torch.Tensor) else t, obj
    )


# --------------------------------------------------------------------------
# Fallback accounting


class FallbackMeter:
    """Counts the ATen ops that ran through the device's CPU fallback while
    inside `measure()`; a device without `fallback_ops()` never falls back."""

    def __init__(self, device):
        mod = getattr(torch, torch.device(device).type, None)
        self._read = getattr(mod, "fallback_ops", None) if device != "cpu" else None
        self.ops = {}

    def _snapshot(self):
        return dict(self._read()) if self._read is not None else {}

    @contextlib.contextmanager
    def measure(self):
        before = self._snapshot()
        try:
            yield
        finally:
            after = self._snapshot()
            for name, count in after.items():
                delta = count - before.get(name, 0)
                if delta > 0:
                    self.ops[name] = self.ops.get(name, 0) + delta


# --------------------------------------------------------------------------
# Comparison


def perturb(obj):
    """A deliberately wrong result, for proving that faults are caught."""

    def bad(t):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return t
        if t.dtype == torch.bool:
            return ~t
        if t.is_floating_point() or t.is_complex():
            return t + 1.0
        return t + 1

    return tree_map(bad, obj)


def _describe(exc):
    text = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    return text[:MESSAGE_CHARS]


def assert_same(actual, expected, rtol, atol, metadata_only):
    """Raise AssertionError if `actual` (on the CPU) differs from `expected`."""
    if metadata_only:
        a, e = tree_leaves(actual), tree_leaves(expected)
        if len(a) != len(e):
            raise AssertionError("output structure differs: %d vs %d leaves" % (len(a), len(e)))
        for x, y in zip(a, e):
            if isinstance(y, torch.Tensor):
                if not isinstance(x, torch.Tensor):
                    raise AssertionError("expected a tensor, got %s" % type(x).__name__)
                if x.shape != y.shape or x.dtype != y.dtype:
                    raise AssertionError(
                        "metadata differs: %s %s vs %s %s"
                        % (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype)
                    )
        return
    try:
        torch.testing.assert_close(
            actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_stride=False
        )
    except (TypeError, ValueError) as exc:
        # Outputs assert_close cannot pair (e.g. strings): plain equality.
        if "No comparison pair" not in str(exc) and "unsupported" not in str(exc).lower():
            raise
        if actual != expected:
            raise AssertionError("%r != %r" % (actual, expected)) from None


class Check:
    """Pass/fail/error tally of one variant (forward, backward, inplace, out)."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.errors = 0
        self.both_raised = 0
        self.message = None

    def note(self, outcome, message=None, sample_index=None):
        if outcome == "pass":
            self.passed += 1
            return
        if outcome == "fail":
            self.failed += 1
        else:
            self.errors += 1
        if message and (self.message is None or (outcome == "fail" and self.failed == 1)):
            self.message = "sample %s: %s" % (sample_index, message)

    def as_dict(self):
        d = {"pass": self.passed, "fail": self.failed, "error": self.errors}
        if self.both_raised:
            d["both_raised"] = self.both_raised
        if self.message:
            d["message"] = self.message
        return d


# --------------------------------------------------------------------------
# One item


class ItemRun:
    def __init__(self, op, dtype_name, device, max_samples, fault):
        self.op = op
        self.dtype = catalog.DTYPES[dtype_name]
        self.dtype_name = dtype_name
        self.device = device
        self.max_samples = max_samples
        self.fault = fault
        self.device_type = torch.device(device).type
        self.rtol, self.atol = catalog.tolerances(op, self.dtype, self.device_type)
        verdict, reason = catalog.compare_cpu_verdict(op, self.dtype, self.device_type)
        self.metadata_only = verdict == "skip"
        self.verdict, self.verdict_reason = verdict, reason
        self.meter = FallbackMeter(device)
        self.checks = {}

    def check(self, name):
        return self.checks.setdefault(name, Check())

    def samples(self, requires_grad):
        torch.manual_seed(0)
        it = self.op.sample_inputs("cpu", self.dtype, requires_grad=requires_grad)
        return list(itertools.islice(it, self.max_samples))

    def _device_call(self, fn):
        """Run fn on the device, return (result on the CPU, exception)."""
        try:
            with self.meter.measure():
                out = to_cpu(fn())
            if self.fault:
                out = perturb(out)
            return out, None
        except Exception as exc:  # noqa: BLE001 - every device failure is data
            return None, exc

    def _judge(self, check, idx, cpu_out, cpu_exc, dev_out, dev_exc):
        if cpu_exc is not None and dev_exc is not None:
            check.both_raised += 1
            check.note("pass")
        elif cpu_exc is not None:
            check.note("fail", "CPU raised %s, the device returned a result" % _describe(cpu_exc), idx)
        elif dev_exc is not None:
            check.note("error", _describe(dev_exc), idx)
        else:
            try:
                assert_same(dev_out, cpu_out, self.rtol, self.atol, self.metadata_only)
                check.note("pass")
            except AssertionError as exc:
                check.note("fail", " ".join(str(exc).split())[:MESSAGE_CHARS], idx)

    # Each variant: the CPU reference, then the device.

    def forward(self, idx, sample):
        op, proc = self.op, sample.output_process_fn_grad
        raw_cpu, cpu_exc = None, None
        try:
            inp, args, kwargs = copy_sample(sample, "cpu")
            raw_cpu = op(inp, *args, **kwargs)
            cpu_out = proc(raw_cpu)
        except Exception as exc:  # noqa: BLE001
            cpu_out, cpu_exc = None, exc

        def on_device():
            inp, args, kwargs = copy_sample(sample, self.device)
            return proc(op(inp, *args, **kwargs))

        dev_out, dev_exc = self._device_call(on_device)
        self._judge(self.check("forward"), idx, cpu_out, cpu_exc, dev_out, dev_exc)
        return raw_cpu

    def inplace(self, idx, sample):
        fn = self.op.get_inplace()
        if fn is None or sample.broadcasts_input or not isinstance(sample.input, torch.Tensor):
            return

        def run(device):
            inp, args, kwargs = copy_sample(sample, device)
            ret = fn(inp, *args, **kwargs)
            return ret, inp

        cpu_out, cpu_exc = None, None
        try:
            cpu_out = run("cpu")
        except Exception as exc:  # noqa: BLE001
            cpu_exc = exc
        dev_out, dev_exc = self._device_call(lambda: run(self.device))
        self._judge(self.check("inplace"), idx, cpu_out, cpu_exc, dev_out, dev_exc)

    def out(self, idx, sample, raw_cpu):
        if not self.op.supports_out or raw_cpu is None:
            return
        if isinstance(raw_cpu, torch.Tensor):
            template = raw_cpu
        elif isinstance(raw_cpu, tuple) and raw_cpu and all(
            isinstance(t, torch.Tensor) for t in raw_cpu
        ):
            template = tuple(raw_cpu)
        else:
            return
        op, proc = self.op, sample.output_process_fn_grad

        def run(device):
            inp, args, kwargs = copy_sample(sample, device)
            outs = tree_map(lambda t: torch.zeros_like(t.detach(), device="cpu").to(device), template)
            ret = op(inp, *args, out=outs, **kwargs)
            return proc(ret)

        cpu_out, cpu_exc = None, None
        try:
            cpu_out = run("cpu")
        except Exception as exc:  # noqa: BLE001
            cpu_exc = exc
        dev_out, dev_exc = self._device_call(lambda: run(self.device))
        self._judge(self.check("out"), idx, cpu_out, cpu_exc, dev_out, dev_exc)

    def backward(self, idx, sample):
        op, proc = self.op, sample.output_process_fn_grad

        def run(device, grad_outputs):
            inp, args, kwargs = copy_sample(sample, device)
            inputs = [
                t for t in tree_leaves((inp, args, kwargs))
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            outs = [
                t for t in tree_leaves(proc(op(inp, *args, **kwargs)))
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            if grad_outputs is None:
                gen = torch.Generator().manual_seed(idx)
                grad_outputs = [
                    torch.randn(o.shape, generator=gen, dtype=o.dtype) if o.is_floating_point()
                    else torch.ones_like(o, device="cpu")
                    for o in outs
                ]
            if len(outs) != len(grad_outputs):
                raise AssertionError(
                    "%d differentiable outputs, the CPU has %d" % (len(outs), len(grad_outputs))
                )
            if not outs or not inputs:
                return None, grad_outputs
            gos = [copy_tensor(g, device) for g in grad_outputs]
            grads = torch.autograd.grad(outs, inputs, gos, allow_unused=True)
            return list(grads), grad_outputs

        try:
            cpu_grads, grad_outputs = run("cpu", None)
            cpu_exc = None
        except Exception as exc:  # noqa: BLE001
            cpu_grads, grad_outputs, cpu_exc = None, None, exc
        if cpu_exc is None and cpu_grads is None:
            return  # nothing differentiable in this sample
        if cpu_exc is not None:
            # Without CPU grad outputs the device still runs with ones.
            grad_outputs = None

        def on_device():
            grads, _ = run(self.device, grad_outputs)
            return grads

        dev_grads, dev_exc = self._device_call(on_device)
        if isinstance(dev_exc, AssertionError):
            self.check("backward").note("fail", " ".join(str(dev_exc).split()), idx)
            return
        self._judge(self.check("backward"), idx, cpu_grads, cpu_exc, dev_grads, dev_exc)

    def run(self):
        start = time.monotonic()
        result = {"op": self.op.full_name, "dtype": self.dtype_name}
        try:
            samples = self.samples(requires_grad=False)
        except Exception as exc:  # noqa: BLE001
            result.update(status="skipped", reason="CPU sample generation failed: " + _describe(exc))
            return result
        if not samples:
            result.update(status="skipped", reason="the OpInfo has no samples for this dtype")
            return result
        for idx, sample in enumerate(samples):
            raw_cpu = self.forward(idx, sample)
            self.inplace(idx, sample)
            self.out(idx, sample, raw_cpu)
        op = self.op
        if op.supports_autograd and self.dtype in op.supported_backward_dtypes("cpu"):
            try:
                grad_samples = self.samples(requires_grad=True)
            except Exception:  # noqa: BLE001 - the forward samples were fine
                grad_samples = []
            for idx, sample in enumerate(grad_samples):
                self.backward(idx, sample)

        checks = {k: c.as_dict() for k, c in self.checks.items()}
        if any(c.failed for c in self.checks.values()):
            status = "fail"
        elif any(c.errors for c in self.checks.values()):
            status = "error"
        elif self.meter.ops:
            status = "fallback"
        else:
            status = "native"
        messages = [
            "%s: %s" % (k, c.message) for k, c in self.checks.items()
            if c.message and (c.failed if status == "fail" else c.errors)
        ]
        result.update(
            status=status,
            samples=len(samples),
            checks=checks,
            fallback_ops=dict(sorted(self.meter.ops.items())),
            seconds=round(time.monotonic() - start, 3),
        )
        if messages:
            result["message"] = messages[0]
        if self.verdict:
            result["compare"] = "%s: %s" % (
                "shapes and dtypes only" if self.metadata_only else "values (OpInfo xfail)",
                self.verdict_reason,
            )
        return result


def fault_ops():
    return {s.strip() for s in os.environ.get(FAULT_ENV, "").split(",") if s.strip()}


def run_item(op_name, dtype_name, device, max_samples):
    """Classify one (op, dtype); never raises."""
    op = catalog.op_db()[op_name]
    try:
        return ItemRun(op, dtype_name, device, max_samples, op_name in fault_ops()).run()
    except Exception as exc:  # noqa: BLE001 - a harness bug must not hide the rest
        return {
            "op": op_name,
            "dtype": dtype_name,
            "status": "error",
            "message": "harness: " + _describe(exc),
            "traceback": traceback.format_exc()[-2000:],
        }
