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
    fuse: str | None = None  # torch.loom.fusion mode while it runs (None: as set)


CONFIGS = [
    Config("cpu_eager", "cpu", None, "CPU eager"),
    Config("cpu_inductor", "cpu", "inductor", "CPU torch.compile (Inductor)"),
    Config("loom_eager", "loom", None, "loom eager"),
    Config("loom_eager_nofuse", "loom", None, "loom eager, fusion off (LOOM_FUSE=0)", fuse="0"),
    Config("loom_inductor", "loom", "inductor", "loom torch.compile() (Inductor)"),
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
        self.available["loom_eager_nofuse"] = (loom_ok, loom_reason)
        for name, backend in (("loom_inductor", "inductor"), ("loom_compile", "loom")):
            if loom_ok:
                self.available[name] = self._probe_loom_compile(backend)
            else:
                self.available[name] = (False, f"loom device not available ({loom_reason})")

    def _probe_loom(self) -> tuple[bool, str | None]:
        torch = self.torch
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                import torch_loom  # noqa: F401  (importing registers the device)
            except Exception as exc:  # a broken build must not stop the CPU runs
                return False, "import torch_loom failed: " + describe_error(exc)
        if torch._C._get_privateuse1_backend_name() != "loom":
            said = "; ".join(str(w.message) for w in caught if "loom" in str(w.message))
            return False, ("torch_loom imported but the loom device is not registered"
                           + (f": {said}" if said else " (is the extension built? `make build`)"))
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

    def _probe_loom_compile(self, backend: str) -> tuple[bool, str | None]:
        torch = self.torch
        try:
            torch._dynamo.reset()
            f = torch.compile(lambda t: t * 2 + 1, backend=backend)
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
    budget_s: float = 1.5   # sampling time per item after warm-up (at most)
    min_budget_s: float = 0.2  # ... and at least, however late the run is
    min_samples: int = 3
    max_samples: int = 21
    # Calls shorter than this are repeated inside one sample. The first call
    # after the idle settle runs slow (about 0.3 ms here, even one thread
    # with no pool to wake): 50 ms keeps that under 1% of a sample, where
    # 10 ms cost a 3 ms call about 9%.
    min_sample_s: float = 0.05
    max_inner: int = 100000  # calls per sample, at most
    slow_call_s: float = 4.0    # beyond this, one warm-up and one sample
    # Idle time before each sample: the configurations share one process,
    # and the thread pool that just ran (OpenMP's spins for milliseconds)
    # must be parked before another one is timed.
    settle_s: float = 0.02


class Timed:
    """One configuration of a workload being measured. `start` makes the
    first call (compilation, lazy initialization: reported on its own) and
    the warm-up; `sample` takes one timed sample, with the device synchronized
    before and after, so samples of several configurations can be taken in
    turn (interleaved, so that a change in the machine's load hits them all
    alike). The figure of merit is the median of the samples."""

    def __init__(self, fn: Callable[[], Any], sync: Callable[[], None], plan: Plan,
                 hurry: bool = False):
        self.fn, self.sync, self.plan, self.hurry = fn, sync, plan, hurry
        self.samples: list[float] = []
        self.first_call_s = 0.0
        self.inner = 1
        self.min_samples = plan.min_samples
        self.budget_s = plan.budget_s
        self.spent_s = 0.0

    def start(self) -> list:
        clock = time.perf_counter
        self.sync()
        t0 = clock()
        out = self.fn()
        self.sync()
        self.first_call_s = est = clock() - t0
        # the first call's output, copied before the warm-up calls: a
        # workload may return a view of state later calls update (an
        # optimizer's parameters), and configurations warm up a different
        # number of times
        out = to_reference(out)
        if self.plan.quick:
            self.samples = [self.first_call_s]
            return out
        warm = []
        for _ in range(1 if est > self.plan.slow_call_s or self.hurry else 2):
            t0 = clock()
            self.fn()
            self.sync()
            warm.append(clock() - t0)
        est = min(warm)  # a warm-up call that hit a hiccup is not the call's time
        if est < self.plan.min_sample_s:
            self.inner = self._calibrate(est)
        if est > self.plan.slow_call_s or self.hurry:
            self.min_samples = 1
        return out

    def _calibrate(self, est: float) -> int:
        """Calls per sample for a call of about `est` seconds. One warm-up
        call that hit a hiccup makes `est` too long and the count too small,
        and then every sample is dominated by the wake-up after the idle
        settle: the count doubles until a block of calls fills half a
        sample."""
        clock = time.perf_counter
        cap = self.plan.max_inner
        n = min(cap, max(1, int(self.plan.min_sample_s / max(est, 1e-7))))
        while n < cap:
            t0 = clock()
            for _ in range(n):
                self.fn()
            self.sync()
            if clock() - t0 >= self.plan.min_sample_s / 2:
                break
            n = min(cap, 2 * n)
        return n

    @property
    def done(self) -> bool:
        n = len(self.samples)
        return n >= self.plan.max_samples or (n >= self.min_samples and self.spent_s >= self.budget_s)

    def sample(self) -> None:
        clock = time.perf_counter
        self.sync()
        if not self.plan.quick:
            time.sleep(self.plan.settle_s)
        t0 = clock()
        for _ in range(self.inner):
            self.fn()
        self.sync()
        dt = clock() - t0
        self.spent_s += dt
        self.samples.append(dt / self.inner)

    def summary(self) -> dict:
        return {"first_call_s": self.first_call_s, "median_s": statistics.median(self.samples),
                "min_s": min(self.samples), "samples_s": self.samples, "inner": self.inner}


def build_in_process(workload_name: str, config_name: str, quick: bool = False):
    """(prepared, sync): a workload built for a configuration in this
    process, for measurements that each need a fresh process (first steps,
    cold compiles)."""
    import torch

    from bench.workloads import WORKLOADS, Ctx

    config = CONFIG_BY_NAME[config_name]
    if config.device == "loom":
        import torch_loom  # noqa: F401
        sync = torch.loom.synchronize
    else:
        sync = lambda: None  # noqa: E731
    workload = next(w for w in WORKLOADS if w.name == workload_name)
    ctx = Ctx(device=torch.device(config.device), backend=config.backend, quick=quick, sync=sync)
    return workload.build(ctx), sync


# ---- checking against CPU eager -------------------------------------------------

def to_reference(out) -> list:
    """Output as a list of float32 CPU tensors (for comparison)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().to("cpu", torch.float32, copy=True)]
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
    item raise, skip itself (as a workload that cannot run there does),
    crash the worker (abort) or hang, to exercise the recovery paths of the
    runner."""
    spec = os.environ.get("LOOM_BENCH_FAULT", "")
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        target, _, kind = entry.partition("=")
        if target != f"{workload_name}/{config_name}":
            continue
        if kind == "raise":
            raise RuntimeError(f"injected fault in {target}")
        if kind == "skip":
            from bench.workloads import Skip

            raise Skip(f"injected skip in {target}")
        if kind == "crash":
            os.abort()
        if kind == "hang":
            time.sleep(3600)


def _with_fusion_mode(mode: str, fn, sync):
    """fn and sync of a configuration that runs under another fusion mode:
    the mode is set as each call starts and kept until the device is
    synchronized (groups form as the queued work executes), then restored,
    so that configurations sampled in turn each run under their own."""
    import torch

    fusion = torch.loom.fusion
    before = fusion.get_mode()

    def call():
        fusion.set_mode(mode)
        return fn()

    def synced():
        sync()
        fusion.set_mode(before)

    return call, synced


class Worker:
    """Measures items grouped by workload: every configuration of a workload
    is built, compiled and warmed up in turn, then sampled round-robin."""

    def __init__(self, threads: int, quick: bool, deadline: float | None,
                 emit: Callable[[dict], None]):
        self.env = Env(threads)
        self.plan = Plan(quick=quick)
        self.quick = quick
        self.deadline = deadline
        self.emit = emit

    def _budget(self, items_left: int) -> float:
        """Sampling time per item: the full budget while the run is on
        schedule, less when it is late, so the last workloads still run."""
        if self.deadline is None:
            return self.plan.budget_s
        share = 0.35 * (self.deadline - time.time()) / max(items_left, 1)
        return max(self.plan.min_budget_s, min(self.plan.budget_s, share))

    def _prepare(self, index, workload, config, result, reference, budget):
        """Builds one configuration and makes its first call and warm-up.
        Returns (Timed, prepared) or None when it failed (result updated)."""
        from bench.workloads import Ctx, Skip

        torch = self.env.torch
        ok, reason = self.env.available[config.name]
        if not ok:
            result.update(status="unavailable", reason=reason)
            return None
        stage = "setup"
        before = self.env.fallback_ops() if config.device != "cpu" else None
        try:
            sync = self.env.sync_for(config.device)
            ctx = Ctx(device=torch.device(config.device), backend=config.backend, quick=self.quick,
                      sync=sync)
            if config.fuse is None:
                prepared = workload.build(ctx)
                fn = prepared.fn
            else:
                with torch.loom.fusion.mode(config.fuse):
                    prepared = workload.build(ctx)
                fn, sync = _with_fusion_mode(config.fuse, prepared.fn, sync)
            result.update(items=prepared.items, flops=prepared.flops, bytes=prepared.bytes,
                          limit=prepared.limit, tol=prepared.tol)
            _inject_fault(workload.name, config.name)
            stage = "first call"
            # a late run keeps to one warm-up call and one sample per item
            timed = Timed(fn, sync, self.plan, hurry=budget <= self.plan.min_budget_s)
            timed.budget_s = budget
            out = timed.start()
            if config.name == BASELINE:
                reference[:] = out
                result["check"] = {"status": "reference"}
            elif reference:
                result["check"] = compare(out, reference, prepared.tol)
            else:
                result["check"] = {"status": "skipped", "detail": "no CPU eager result to compare with"}
            return timed, prepared
        except Skip as exc:
            result.update(status="skipped", reason=str(exc))
            return None
        except Exception as exc:
            result.update(status="error", stage=stage, reason=describe_error(exc),
                          traceback=traceback.format_exc(limit=8)[-2000:])
            return None
        finally:
            if before is not None:
                after = self.env.fallback_ops()
                if after is not None:
                    delta = {k: (v - before.get(k, 0)) if isinstance(v, int) else v
                             for k, v in after.items()}
                    result["fallback_ops"] = {k: v for k, v in delta.items() if v}

    def run_group(self, group, items_left: int) -> None:
        from bench.workloads import BY_NAME

        torch = self.env.torch
        _safe(torch._dynamo.reset)
        workload = BY_NAME[group[0][1]]
        reference: list = []
        active = []  # (index, result, timed, prepared)
        for index, _, config_name in group:
            self.emit({"event": "start", "item": index})
            result: dict[str, Any] = {"workload": workload.name, "config": config_name}
            got = self._prepare(index, workload, CONFIG_BY_NAME[config_name], result, reference,
                                self._budget(items_left))
            if got is not None and not self.quick:
                for phase in got[1].extra.values():
                    phase.clear()  # phases of the first call and warm-up
            if got is None:
                self.emit({"event": "result", "item": index, "result": result})
            else:
                active.append((index, result, *got))
            items_left -= 1
        pending = list(active)
        while pending:
            for entry in list(pending):
                index, result, timed, _ = entry
                if timed.done or self.quick:
                    pending.remove(entry)
                    continue
                self.emit({"event": "start", "item": index})
                try:
                    timed.sample()
                except Exception as exc:
                    result.update(status="error", stage="measure", reason=describe_error(exc),
                                  traceback=traceback.format_exc(limit=8)[-2000:])
                    pending.remove(entry)
        for index, result, timed, prepared in active:
            if result.get("status") != "error":
                result.update(status="ok", **timed.summary())
                if prepared.extra:
                    result["extra"] = {k: statistics.median(v) for k, v in prepared.extra.items() if v}
            self.emit({"event": "result", "item": index, "result": result})
        del active, pending, reference
        gc.collect()
        _safe(torch._dynamo.reset)

    def run(self, items: list[tuple[int, str, str]]):
        self.emit({"event": "env", "info": self.env.info,
                   "available": {k: {"available": v[0], "reason": v[1]} for k, v in self.env.available.items()}})
        groups: list[list] = []
        for item in items:
            if groups and groups[-1][0][1] == item[1]:
                groups[-1].append(item)
            else:
                groups.append([item])
        left = len(items)
        for group in groups:
            self.run_group(group, left)
            left -= len(group)
        self.emit({"event": "done"})


def worker_main(spec_json: str, fd: int):
    import faulthandler

    faulthandler.enable()  # a crash leaves the Python stack in the worker's log
    spec = json.loads(spec_json)
    stream = os.fdopen(fd, "w", buffering=1)

    def emit(obj):
        stream.write(json.dumps(obj, default=_json_default) + "\n")
        stream.flush()

    worker = Worker(spec["threads"], spec["quick"], spec.get("deadline"), emit)
    worker.run([tuple(it) for it in spec["items"]])
    stream.close()


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return str(obj)
