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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from . import catalog

FAULT_ENV = "LOOM_CONFORMANCE_FAULT"
MESSAGE_CHARS = 400


# --------------------------------------------------------------------------
# Copies


def copy_tensor(t, device, upcast_from=None):
    """An exact copy of `t` on `device`: same sizes, strides, storage offset
    pattern and requires_grad (as a fresh leaf). With `upcast_from`, a tensor
    of that dtype becomes float64 (for the high-precision reference)."""
    with torch.no_grad():
        if t.layout != torch.strided or t.is_quantized or t.numel() == 0:
            out = t.detach().to(device, copy=True)
        else:
            # The storage span the view touches, starting at its offset.
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            flat = t.detach().as_strided((span,), (1,))
            base = flat.to(device, copy=True)
            if upcast_from is not None and t.dtype == upcast_from:
                base = base.to(torch.float64)
            out = base.as_strided(t.shape, t.stride(), 0)
        if upcast_from is not None and out.dtype == upcast_from:
            out = out.to(torch.float64)
        out = out.detach()
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def copy_to(obj, device, upcast_from=None, keep_on_cpu=None, _count=None):
    """Deep copy of a sample structure, moving tensors and device arguments
    (the samples are made for the CPU: "cpu" there means the device under test).
    `keep_on_cpu`: indices, in traversal order, of tensors that stay on the CPU."""
    if _count is None:
        _count = itertools.count()
    if isinstance(obj, torch.Tensor):
        n = next(_count)
        return copy_tensor(obj, "cpu" if keep_on_cpu and n in keep_on_cpu else device, upcast_from)
    if isinstance(obj, torch.device):
        return torch.device(device) if obj.type == "cpu" else obj
    if isinstance(obj, str):
        return device if obj == "cpu" else obj
    if type(obj) in (list, tuple):
        return type(obj)(copy_to(x, device, upcast_from, keep_on_cpu, _count) for x in obj)
    if isinstance(obj, dict):
        return {k: copy_to(v, device, upcast_from, keep_on_cpu, _count) for k, v in obj.items()}
    return obj


def copy_sample(sample, device, upcast_from=None, keep_on_cpu=None):
    count = itertools.count()
    return (
        copy_to(sample.input, device, upcast_from, keep_on_cpu, count),
        copy_to(sample.args, device, upcast_from, keep_on_cpu, count),
        copy_to(sample.kwargs, device, upcast_from, keep_on_cpu, count),
    )


def to_cpu(obj):
    return tree_map(
        lambda t: t.detach().to("cpu") if isinstance(t, torch.Tensor) else t, obj
    )


# --------------------------------------------------------------------------
# Fallback accounting


class _SeededOpSpy(TorchDispatchMode):
    """Notes the first ATen op tagged nondeterministic_seeded that runs."""

    def __init__(self):
        super().__init__()
        self.seen = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.seen is None and torch.Tag.nondeterministic_seeded in func.tags:
            self.seen = str(func)
        return func(*args, **(kwargs or {}))


class FallbackMeter:
    """Counts the ATen ops that ran through the device's CPU fallback while
    inside `measure()` (around the op itself, not the harness's copies); a
    device without `fallback_ops()` never falls back."""

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


def assert_same(actual, expected, dtype, rtol, atol, metadata_only):
    """Raise AssertionError if `actual` (on the CPU) differs from `expected`.

    `rtol`/`atol` are the item's tolerances for outputs of its own `dtype`;
    an output of another dtype (cos of int64 is float32) gets assert_close's
    defaults for that dtype."""
    a, e = tree_leaves(actual), tree_leaves(expected)
    if len(a) != len(e):
        raise AssertionError("output structure differs: %d vs %d leaves" % (len(a), len(e)))
    for i, (x, y) in enumerate(zip(a, e)):
        where = "output %d: " % i if len(e) > 1 else ""
        if metadata_only:
            if isinstance(y, torch.Tensor):
                if not isinstance(x, torch.Tensor):
                    raise AssertionError(where + "expected a tensor, got %s" % type(x).__name__)
                if x.shape != y.shape or x.dtype != y.dtype:
                    raise AssertionError(
                        where + "metadata differs: %s %s vs %s %s"
                        % (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype)
                    )
            continue
        rt, at = rtol, atol
        if isinstance(y, torch.Tensor) and y.dtype != dtype:
            rt = at = None
        try:
            torch.testing.assert_close(x, y, rtol=rt, atol=at, equal_nan=True, check_stride=False)
        except (TypeError, ValueError) as exc:
            # Outputs assert_close cannot pair (e.g. strings): plain equality.
            if "No comparison pair" not in str(exc) and "unsupported" not in str(exc).lower():
                raise
            if x != y:
                raise AssertionError(where + "%r != %r" % (x, y)) from None
        except AssertionError as exc:
            raise AssertionError(where + str(exc)) from None


def within_reference(actual, cpu, reference, rtol, atol):
    """True if every floating tensor of `actual` is, elementwise, no further
    from the float64 `reference` than `cpu` is (plus the tolerances), and
    everything else matches `cpu` exactly."""
    a, c, r = tree_leaves(actual), tree_leaves(cpu), tree_leaves(reference)
    if not len(a) == len(c) == len(r):
        return False
    for x, y, z in zip(a, c, r):
        if not isinstance(y, torch.Tensor):
            if x != y and not (isinstance(x, float) and isinstance(z, float)
                               and abs(x - z) <= abs(y - z) + atol + rtol * abs(z)):
                return False
            continue
        if not isinstance(x, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not (y.is_floating_point() and isinstance(z, torch.Tensor) and z.shape == y.shape):
            if not torch.equal(x, y):
                return False
            continue
        x64, y64, z64 = x.double(), y.double(), z.detach().double()
        dev_err, cpu_err = (x64 - z64).abs(), (y64 - z64).abs()
        ok = (
            (x64 == y64)
            | (x64.isnan() & (y64.isnan() | z64.isnan()))
            | (dev_err <= cpu_err + atol + rtol * z64.abs())
        )
        if not bool(ok.all()):
            return False
    return True


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
        self.verdict, self.verdict_reason = verdict, reason
        # Values are compared unless they cannot match: the OpInfo says the
        # output is non-deterministic or undefined, or (decided on the first
        # samples) the CPU output itself depends on the random seed.
        self.metadata_only = op.has_nondeterministic_output or (
            verdict == "skip" and any(w in (reason or "").lower() for w in ("determin", "undefined"))
        )
        self.meter = FallbackMeter(device)
        self.checks = {}
        self._resident = {}  # requires_grad -> per sample: leaves the OpInfo keeps on the CPU

    def check(self, name):
        return self.checks.setdefault(name, Check())

    def samples(self, requires_grad):
        torch.manual_seed(0)
        it = self.op.sample_inputs("cpu", self.dtype, requires_grad=requires_grad)
        return list(itertools.islice(it, self.max_samples))

    def _device_call(self, fn):
        """Run fn on the device, return (result on the CPU, exception)."""
        try:
            out = to_cpu(fn())
            if self.fault:
                out = perturb(out)
            return out, None
        except Exception as exc:  # noqa: BLE001 - every device failure is data
            return None, exc

    def _judge(self, check, idx, cpu, dev, reference=None):
        """Classify one check from the (result, exception) pairs of both sides.

        `reference(upcast)` reruns the CPU side; on a value mismatch at a
        reduced precision it gives a float64 reference, and the device passes
        if it is as close to it as the CPU result is (the CPU's own rounding
        is not the truth: e.g. a gradient that is exactly zero in exact
        arithmetic)."""
        (cpu_out, cpu_exc), (dev_out, dev_exc) = cpu, dev
        if cpu_exc is not None and dev_exc is not None:
            check.both_raised += 1
            check.note("pass")
        elif cpu_exc is not None:
            check.note("fail", "CPU raised %s, the device returned a result" % _describe(cpu_exc), idx)
        elif dev_exc is not None:
            check.note("error", _describe(dev_exc), idx)
        else:
            try:
                assert_same(dev_out, cpu_out, self.dtype, self.rtol, self.atol, self.metadata_only)
                check.note("pass")
            except AssertionError as exc:
                if reference is not None and self._closer_than_cpu(dev_out, cpu_out, reference):
                    check.note("pass")
                else:
                    check.note("fail", " ".join(str(exc).split())[:MESSAGE_CHARS], idx)

    def _closer_than_cpu(self, dev_out, cpu_out, reference):
        if self.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return False
        try:
            ref = reference(True)
        except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
            return False
        return within_reference(dev_out, cpu_out, ref, self.rtol, self.atol)

    @staticmethod
    def _capture(fn):
        try:
            return fn(), None
        except Exception as exc:  # noqa: BLE001
            return None, exc

    def _inputs(self, sample, device, upcast, key=None):
        keep = self._resident_leaves(*key) if key and device != "cpu" else None
        return copy_sample(sample, device, self.dtype if upcast else None, keep)

    def _resident_leaves(self, requires_grad, idx):
        return self._resident.get(requires_grad, {}).get(idx)

    def _find_resident(self, requires_grad):
        """Which sample tensors the OpInfo puts on the CPU whatever the device
        (e.g. tensor_split's indices): generate the samples on the meta device
        and look. Computed once, when a device run complains about the CPU."""
        if requires_grad in self._resident:
            return False
        found = {}
        try:
            it = self.op.sample_inputs("meta", self.dtype, requires_grad=requires_grad)
            for idx, s in enumerate(itertools.islice(it, self.max_samples)):
                leaves = [t for t in tree_leaves((s.input, s.args, s.kwargs)) if isinstance(t, torch.Tensor)]
                cpu = {i for i, t in enumerate(leaves) if t.device.type == "cpu"}
                if cpu:
                    found[idx] = cpu
        except Exception:  # noqa: BLE001 - no meta samples: nothing to learn
            found = {}
        self._resident[requires_grad] = found
        return bool(found)

    def _device_run(self, run, idx, requires_grad):
        """The device side of a check, retried once with the OpInfo's
        CPU-resident tensors left on the CPU if the op asked for that."""
        dev = self._device_call(lambda: run(self.device))
        if (
            dev[1] is not None and "cpu" in str(dev[1]).lower()
            and self._resident_leaves(requires_grad, idx) is None
            and self._find_resident(requires_grad)
            and self._resident_leaves(requires_grad, idx)
        ):
            dev = self._device_call(lambda: run(self.device))
        return dev

    def _rng_dependent(self, samples):
        """The first ATen op tagged nondeterministic_seeded (it draws random
        numbers) that the CPU forward of the first samples calls, or None.
        Such values are tied to the generator's algorithm, the device's own."""
        spy = _SeededOpSpy()
        for sample in samples[:3]:
            try:
                inp, args, kwargs = copy_sample(sample, "cpu")
                with spy:
                    self.op(inp, *args, **kwargs)
            except Exception:  # noqa: BLE001 - the forward check will report it
                pass
            if spy.seen:
                return spy.seen
        return None

    # Each variant: run(device, upcast) on the CPU for the reference, then on
    # the device; upcast=True reruns the CPU side in float64 on a mismatch.

    def forward(self, idx, sample):
        op, proc = self.op, sample.output_process_fn_grad
        raw = []

        def run(device, upcast=False):
            inp, args, kwargs = self._inputs(sample, device, upcast, (False, idx))
            with self.meter.measure():
                out = op(inp, *args, **kwargs)
                processed = proc(out)
            if device == "cpu" and not upcast:
                raw.append(out)
            return processed

        cpu = self._capture(lambda: run("cpu"))
        dev = self._device_run(run, idx, False)
        self._judge(self.check("forward"), idx, cpu, dev, lambda up: run("cpu", up))
        return raw[0] if raw else None

    def inplace(self, idx, sample):
        fn = self.op.get_inplace()
        if fn is None or sample.broadcasts_input or not isinstance(sample.input, torch.Tensor):
            return

        def run(device, upcast=False):
            inp, args, kwargs = self._inputs(sample, device, upcast, (False, idx))
            with self.meter.measure():
                ret = fn(inp, *args, **kwargs)
            return ret, inp

        cpu = self._capture(lambda: run("cpu"))
        dev = self._device_run(run, idx, False)
        self._judge(self.check("inplace"), idx, cpu, dev, lambda up: run("cpu", up))

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

        def run(device, upcast=False):
            inp, args, kwargs = self._inputs(sample, device, upcast, (False, idx))
            outs = tree_map(
                lambda t: copy_tensor(torch.zeros_like(t.detach()), device,
                                      self.dtype if upcast else None),
                template,
            )
            with self.meter.measure():
                return proc(op(inp, *args, out=outs, **kwargs))

        cpu = self._capture(lambda: run("cpu"))
        dev = self._device_run(run, idx, False)
        self._judge(self.check("out"), idx, cpu, dev, lambda up: run("cpu", up))

    def backward(self, idx, sample):
        op, proc = self.op, sample.output_process_fn_grad
        cotangents = []  # the CPU's random output gradients, reused on the device

        def run(device, upcast=False):
            inp, args, kwargs = self._inputs(sample, device, upcast, (True, idx))
            inputs = [
                t for t in tree_leaves((inp, args, kwargs))
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            with self.meter.measure():
                result = proc(op(inp, *args, **kwargs))
            outs = [
                t for t in tree_leaves(result)
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            if not cotangents:
                gen = torch.Generator().manual_seed(idx)
                cotangents.extend(
                    torch.randn(o.shape, generator=gen, dtype=o.dtype)
                    if o.is_floating_point() or o.is_complex()
                    else torch.ones(o.shape, dtype=o.dtype)
                    for o in outs
                )
            if len(outs) != len(cotangents):
                raise AssertionError(
                    "%d differentiable outputs, the CPU has %d" % (len(outs), len(cotangents))
                )
            if not outs or not inputs:
                return None
            gos = [
                copy_tensor(g, o.device, self.dtype if upcast else None).to(o.dtype)
                for g, o in zip(cotangents, outs)
            ]
            with self.meter.measure():
                return list(torch.autograd.grad(outs, inputs, gos, allow_unused=True))

        cpu = self._capture(lambda: run("cpu"))
        if cpu == (None, None):
            return  # nothing differentiable in this sample
        dev = self._device_run(run, idx, True)
        if isinstance(dev[1], AssertionError):
            self.check("backward").note("fail", " ".join(str(dev[1]).split()), idx)
            return
        self._judge(self.check("backward"), idx, cpu, dev, lambda up: run("cpu", up))

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
        seeded = None if self.metadata_only else self._rng_dependent(samples)
        if seeded:
            self.metadata_only = True
            self.verdict_reason = "draws random numbers (%s)" % seeded
        elif self.op.has_nondeterministic_output:
            self.verdict_reason = "the OpInfo declares the output non-deterministic"
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
        if self.metadata_only:
            result["compare"] = "shapes and dtypes only: %s" % self.verdict_reason
        elif self.verdict:
            result["compare"] = "values; the OpInfo %s test_compare_cpu: %s" % (
                "skips" if self.verdict == "skip" else "expects to fail", self.verdict_reason,
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
