"""Measurement inside one worker process.

A worker imports torch once, sets the thread count, finds out which
configurations can run here (is the loom device usable? is the loom compile
backend registered?), then measures its list of (workload, configuration)
items in order, writing one JSON line per event to the report pipe. Every
failure is caught and reported as data: an item that cannot run is "not
available" with the reason, never a crash of the run.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Config:
    name: str
    device: str
    backend: str | None
    label: str


CONFIGS = [
    Config("cpu_eager", "cpu", None, "CPU eager"),
    Config("cpu_inductor", "cpu", "inductor", "CPU torch.compile (Inductor)"),
    Config("loom_eager", "loom", None, "loom eager"),
    Config("loom_compile", "loom", "loom", "loom torch.compile(backend=\"loom\")"),
]
CONFIG_BY_NAME = {c.name: c for c in CONFIGS}
BASELINE = "cpu_eager"


def describe_error(exc: BaseException, limit: int = 400) -> str:
    """One line naming the exception: type and the first meaningful line."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    msg = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# ---- environment --------------------------------------------------------------

class Env:
    """What this process can run, probed once."""

    def __init__(self, threads: int):
        import torch

        self.torch = torch
        torch.set_num_threads(threads)
        self.info: dict[str, Any] = {
            "torch_version": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "LOOM_NUM_THREADS": os.environ.get("LOOM_NUM_THREADS"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "cpu_capability": _safe(lambda: torch.backends.cpu.get_cpu_capability()),
        }
        self.available: dict[str, tuple[bool, str | None]] = {
            "cpu_eager": (True, None),
            "cpu_inductor": (True, None),
        }
        loom_ok, loom_reason = self._probe_loom()
        self.available["loom_eager"] = (loom_ok, loom_reason)
        if loom_ok:
            self.available["loom_compile"] = self._probe_loom_compile()
        else:
            self.available["loom_compile"] = (False, f"loom device not available ({loom_reason})")

    def _probe_loom(self) -> tuple[bool, str | None]:
        torch = self.torch
        try:
            import torch_loom  # noqa: F401  (importing registers the device)
        except Exception as exc:  # a broken build must not stop the CPU runs
            return False, "import torch_loom failed: " + describe_error(exc)
        if torch._C._get_privateuse1_backend_name() != "loom":
            return False, ("torch_loom imported but the loom device is not registered "
                           "(is the extension built? `make build`)")
        try:
            x = torch.arange(8, dtype=torch.float32, device="loom")
            y = (x * 2 + 1).cpu()
            if not torch.equal(y, torch.arange(8, dtype=torch.float32) * 2 + 1):
                return False, "loom device returned wrong values for (x * 2 + 1)"
        except Exception as exc:
            return False, describe_error(exc)
        mod = getattr(torch, "loom", None)
        self.info["loom_device_name"] = _safe(lambda: mod.get_device_name(0))
        self.info["loom_device_threads"] = _safe(lambda: mod.get_device_properties(0).num_threads)
        return True, None

    def _probe_loom_compile(self) -> tuple[bool, str | None]:
        torch = self.torch
        try:
            torch._dynamo.reset()
            f = torch.compile(lambda t: t * 2 + 1, backend="loom")
            x = torch.arange(8, dtype=torch.float32, device="loom")
            y = f(x).cpu()
            if not torch.equal(y, torch.arange(8, dtype=torch.float32) * 2 + 1):
                return False, "compiled (x * 2 + 1) returned wrong values"
            return True, None
        except Exception as exc:
            return False, describe_error(exc)
        finally:
            _safe(torch._dynamo.reset)

    def sync_for(self, device: str) -> Callable[[], None]:
        torch = self.torch
        if device == "cpu":
            return lambda: None
        mod = getattr(torch, device, None)
        if mod is not None and hasattr(mod, "synchronize"):
            return mod.synchronize
        return torch.accelerator.synchronize

    def fallback_ops(self) -> dict | None:
        mod = getattr(self.torch, "loom", None)
        fn = getattr(mod, "fallback_ops", None) if mod is not None else None
        if fn is None:
            return None
        try:
            ops = fn()
        except Exception:
            return None
        if isinstance(ops, dict):
            return {str(k): int(v) if isinstance(v, (int, float)) else v for k, v in ops.items()}
        return {str(op): 1 for op in ops}


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


# ---- timing --------------------------------------------------------------------

@dataclass
class Plan:
    quick: bool
    budget_s: float = 1.5   # sampling time per item, after warm-up
    min_samples: int = 3
    max_samples: int = 21
    min_sample_s: float = 0.01  # tiny calls are repeated inside one sample
    slow_call_s: float = 4.0    # beyond this, one warm-up and one sample


def measure(fn: Callable[[], Any], sync: Callable[[], None], plan: Plan) -> dict:
    """Times `fn` with the device synchronized around every sample. The first
    call (which includes compilation and lazy initialization) is reported on
    its own; the figure of merit is the median of the samples after warm-up."""
    clock = time.perf_counter
    sync()
    t0 = clock()
    out = fn()
    sync()
    first = clock() - t0
    if plan.quick:
        return {"first_call_s": first, "median_s": first, "samples_s": [first], "inner": 1,
                "output": out}

    # warm-up: two calls, or one when a call is slow
    est = first
    for _ in range(1 if first > plan.slow_call_s else 2):
        t0 = clock()
        fn()
        sync()
        est = clock() - t0
    inner = 1
    if est < plan.min_sample_s:
        inner = min(1000, max(1, int(plan.min_sample_s / max(est, 1e-7))))
    min_samples = 1 if est > plan.slow_call_s else plan.min_samples
    samples = []
    start = clock()
    while len(samples) < plan.max_samples:
        sync()
        t0 = clock()
        for _ in range(inner):
            fn()
        sync()
        samples.append((clock() - t0) / inner)
        if len(samples) >= min_samples and clock() - start >= plan.budget_s:
            break
    return {"first_call_s": first, "median_s": statistics.median(samples), "samples_s": samples,
            "inner": inner, "output": out}


# ---- checking against CPU eager -------------------------------------------------

def to_reference(out) -> list:
    """Output as a list of float32 CPU tensors (for comparison)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().to("cpu", torch.float32)]
    if isinstance(out, (tuple, list)):
        refs = []
        for o in out:
            refs += to_reference(o)
        return refs
    return []


def compare(out: list, ref: list, tol: float) -> dict:
    import torch

    if len(out) != len(ref):
        return {"status": "mismatch", "detail": f"{len(out)} outputs, expected {len(ref)}"}
    worst = 0.0
    for o, r in zip(out, ref):
        if o.shape != r.shape:
            return {"status": "mismatch", "detail": f"shape {tuple(o.shape)}, expected {tuple(r.shape)}"}
        if not torch.isfinite(o).all() and torch.isfinite(r).all():
            return {"status": "mismatch", "detail": "non-finite values"}
        scale = max(r.abs().max().item() if r.numel() else 0.0, 1e-6)
        err = (o - r).abs().max().item() / scale if r.numel() else 0.0
        worst = max(worst, err)
    status = "ok" if worst <= tol else "mismatch"
    return {"status": status, "rel_err": worst, "tol": tol}


# ---- the worker ------------------------------------------------------------------

def _inject_fault(workload_name: str, config_name: str) -> None:
    """Testing hook: LOOM_BENCH_FAULT="workload/config=kind,..." makes that
    item raise, crash the worker (abort) or hang, to exercise the recovery
    paths of the runner."""
    spec = os.environ.get("LOOM_BENCH_FAULT", "")
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        target, _, kind = entry.partition("=")
        if target != f"{workload_name}/{config_name}":
            continue
        if kind == "raise":
            raise RuntimeError(f"injected fault in {target}")
        if kind == "crash":
            os.abort()
        if kind == "hang":
            time.sleep(3600)

class Worker:
    def __init__(self, threads: int, quick: bool, emit: Callable[[dict], None]):
        self.env = Env(threads)
        self.plan = Plan(quick=quick)
        self.quick = quick
        self.emit = emit
        self.references: dict[str, list] = {}

    def run_item(self, index: int, workload_name: str, config_name: str) -> dict:
        from bench.workloads import BY_NAME, Ctx

        torch = self.env.torch
        config = CONFIG_BY_NAME[config_name]
        workload = BY_NAME[workload_name]
        result: dict[str, Any] = {"workload": workload_name, "config": config_name}
        ok, reason = self.env.available[config_name]
        if not ok:
            result.update(status="unavailable", reason=reason)
            return result

        stage = "setup"
        before = self.env.fallback_ops() if config.device != "cpu" else None
        prepared = None
        try:
            torch._dynamo.reset()
            sync = self.env.sync_for(config.device)
            ctx = Ctx(device=torch.device(config.device), backend=config.backend, quick=self.quick,
                      sync=sync)
            prepared = workload.build(ctx)
            _inject_fault(workload_name, config_name)
            result.update(items=prepared.items, flops=prepared.flops, bytes=prepared.bytes,
                          limit=prepared.limit)
            stage = "run"
            timing = measure(prepared.fn, sync, self.plan)
            out = to_reference(timing.pop("output"))
            result.update(status="ok", **timing)
            if config_name == BASELINE:
                self.references[workload_name] = out
                result["check"] = {"status": "reference"}
            elif workload_name in self.references:
                result["check"] = compare(out, self.references[workload_name], prepared.tol)
            else:
                result["check"] = {"status": "skipped", "detail": "no CPU eager reference in this process"}
            if prepared.extra:
                result["extra"] = {k: statistics.median(v) for k, v in prepared.extra.items() if v}
        except Exception as exc:
            result.update(status="error", stage=stage, reason=describe_error(exc),
                          traceback=traceback.format_exc(limit=8)[-2000:])
        finally:
            if before is not None:
                after = self.env.fallback_ops()
                if after is not None:
                    delta = {k: (v - before.get(k, 0)) if isinstance(v, int) else v
                             for k, v in after.items()}
                    result["fallback_ops"] = {k: v for k, v in delta.items() if v}
            del prepared
            gc.collect()
            _safe(torch._dynamo.reset)
        return result

    def run(self, items: list[tuple[int, str, str]]):
        self.emit({"event": "env", "info": self.env.info,
                   "available": {k: {"available": v[0], "reason": v[1]} for k, v in self.env.available.items()}})
        for index, workload_name, config_name in items:
            self.emit({"event": "start", "item": index})
            result = self.run_item(index, workload_name, config_name)
            self.emit({"event": "result", "item": index, "result": result})
        self.emit({"event": "done"})


def worker_main(spec_json: str, fd: int):
    spec = json.loads(spec_json)
    stream = os.fdopen(fd, "w", buffering=1)

    def emit(obj):
        stream.write(json.dumps(obj, default=_json_default) + "\n")
        stream.flush()

    worker = Worker(spec["threads"], spec["quick"], emit)
    worker.run([tuple(it) for it in spec["items"]])
    stream.close()


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return str(obj)
