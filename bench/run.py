"""Runs the benchmarks: `python -m bench.run [--quick] [--out DIR] ...`.

Writes DIR/results.json, DIR/RESULTS.md and DIR/results.png (DIR defaults to
bench/). The C microbenchmarks give the physical limits; then one worker
process measures every (workload, configuration) pair. If the worker dies
(a crash in a young backend) or hangs, the pair it was on is recorded as
crashed or timed out and a new worker carries on with the rest, so every
pair gets a result and the run always finishes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
             "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def parse_args(argv):
    from bench.harness import CONFIGS
    from bench.workloads import WORKLOADS

    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, one call each (a smoke test)")
    p.add_argument("--out", type=Path, default=ROOT / "bench", help="output directory (default: bench/)")
    p.add_argument("--configs", default=",".join(c.name for c in CONFIGS),
                   help="comma-separated subset of: " + ", ".join(c.name for c in CONFIGS))
    p.add_argument("--workloads", default="all",
                   help="comma-separated subset of: " + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every configuration (default: LOOM_NUM_THREADS or all cores)")
    p.add_argument("--no-limits", action="store_true", help="skip the C microbenchmarks")
    p.add_argument("--item-timeout", type=float, default=None,
                   help="seconds one (workload, configuration) pair may take (default 300; quick 120)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for all pairs; the rest are skipped (default 720; quick 600)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return args
    names = {c.name for c in CONFIGS}
    args.config_list = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in args.config_list if c not in names]
    if bad:
        p.error(f"unknown configuration(s) {bad}; choose from {sorted(names)}")
    wnames = [w.name for w in WORKLOADS]
    if args.workloads == "all":
        args.workload_list = wnames
    else:
        args.workload_list = [w.strip() for w in args.workloads.split(",") if w.strip()]
        bad = [w for w in args.workload_list if w not in wnames]
        if bad:
            p.error(f"unknown workload(s) {bad}; choose from {wnames}")
    if args.threads is None:
        env = os.environ.get("LOOM_NUM_THREADS", "")
        args.threads = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.item_timeout is None:
        args.item_timeout = 120.0 if args.quick else 300.0
    if args.budget is None:
        args.budget = 600.0 if args.quick else 720.0
    return args


# ---- machine description ---------------------------------------------------------

def machine_info() -> dict:
    info = {"cpu_model": platform.processor() or platform.machine(), "flags": [],
            "logical_cpus": os.cpu_count(), "cores": os.cpu_count(), "os": platform.platform()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        cores = set()
        phys = core = None
        for line in text.splitlines():
            key, _, val = line.partition(":")
            key, val = key.strip(), val.strip()
            if key == "model name":
                info["cpu_model"] = val
            elif key == "flags" and not info["flags"]:
                info["flags"] = val.split()
            elif key == "physical id":
                phys = val
            elif key == "core id":
                core = val
            elif not line.strip() and core is not None:
                cores.add((phys, core))
                phys = core = None
        if core is not None:
            cores.add((phys, core))
        if cores:
            info["cores"] = len(cores)
    except OSError:
        pass
    info["isa_flags"] = [f for f in ISA_FLAGS if f in info["flags"]]
    try:
        info["l3"] = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2 ** 20, 1)
    except (OSError, ValueError):
        pass
    return info


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# ---- the worker processes ----------------------------------------------------------

def worker_env(threads: int) -> dict:
    env = dict(os.environ)
    env["LOOM_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    # torch_loom is imported explicitly by the worker, so that a broken
    # build is reported as "loom not available" instead of failing `import torch`
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _log_tail(path: Path, n: int = 900) -> str:
    """The end of a crashed worker's output: faulthandler's report (the
    signal and the innermost Python frames) when there is one."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Fatal Python error"):
            frames = [ln for ln in lines[i + 1:] if ln.startswith("File ")]
            return " | ".join([lines[i]] + frames[:4])[-n:]
    return " | ".join(lines[-4:])[-n:]


def run_items(items, args, on_result) -> dict:
    """Measures `items` [(index, workload, config)] in worker processes;
    calls on_result(index, result) for each. Returns the first worker's env."""
    env_info = {}
    remaining = list(items)
    start = time.monotonic()
    args.deadline = time.time() + args.budget
    log = Path(tempfile.mkstemp(prefix="loom-bench-worker-", suffix=".log")[1])
    try:
        while remaining:
            if time.monotonic() - start > args.budget:
                for idx, w, c in remaining:
                    on_result(idx, {"workload": w, "config": c, "status": "skipped",
                                    "reason": f"time budget of {args.budget:.0f} s used up"})
                break
            done_ids = set()
            failed, why = _run_worker(remaining, args, log, env_info, on_result, done_ids, start)
            for idx, w, c in failed:
                on_result(idx, {"workload": w, "config": c, "status": why[0], "reason": why[1]})
                done_ids.add(idx)
            remaining = [it for it in remaining if it[0] not in done_ids]
    finally:
        log.unlink(missing_ok=True)
    return env_info


def _run_worker(items, args, log, env_info, on_result, done_ids, start):
    """One worker process over `items`. Returns (items it failed on, (status,
    reason)): the item in progress when it crashed or hung, all of them when
    it could not even start; ([], None) when it finished or stopped on the
    budget."""
    rfd, wfd = os.pipe()
    spec = json.dumps({"threads": args.threads, "quick": args.quick, "items": items,
                       "deadline": args.deadline})
    with open(log, "w") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "bench.run", "--worker", "--spec", spec, "--fd", str(wfd)],
                                cwd=ROOT, env=worker_env(args.threads), stdout=logf, stderr=subprocess.STDOUT,
                                pass_fds=(wfd,), start_new_session=True)
    os.close(wfd)
    by_index = {it[0]: it for it in items}
    current = None
    env_seen = False
    item_started = time.monotonic()
    buf = b""
    reader = os.fdopen(rfd, "rb", buffering=0)
    try:
        while True:
            limit = args.item_timeout if current is not None else max(args.item_timeout, 180)
            wait = limit - (time.monotonic() - item_started)
            if wait <= 0:
                _kill(proc)
                if not env_seen:
                    return items, ("timeout", f"worker did not start within {limit:.0f} s")
                if current is None:
                    return [], ("timeout", "")
                return [current], ("timeout", f"no result within {limit:.0f} s")
            ready, _, _ = select.select([reader], [], [], min(wait, 5.0))
            if not ready:
                continue
            chunk = reader.read(65536)
            if not chunk:
                rc = proc.wait()
                how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
                tail = _log_tail(log)
                why = ("crashed", f"worker {how}" + (f"; last output: {tail}" if tail else ""))
                if not env_seen:
                    return items, why
                return ([current] if current is not None else []), why
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                kind = ev.get("event")
                if kind == "env":
                    env_seen = True
                    if not env_info:
                        env_info.update(ev)
                    item_started = time.monotonic()
                elif kind == "start":
                    current = by_index[ev["item"]]
                    item_started = time.monotonic()
                elif kind == "result":
                    on_result(ev["item"], ev["result"])
                    done_ids.add(ev["item"])
                    current = None
                    item_started = time.monotonic()
                    if time.monotonic() - start > args.budget and len(done_ids) < len(items):
                        _kill(proc)
                        return [], None
                elif kind == "done":
                    proc.wait()
                    return [], None
    finally:
        reader.close()
        if proc.poll() is None:
            _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    """Ends the worker we started (and anything it started, e.g. compilers),
    by its own process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# ---- main ----------------------------------------------------------------------------

def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        from bench.harness import worker_main

        worker_main(args.spec, args.fd)
        return 0

    from bench import limits as limits_mod
    from bench import report
    from bench.harness import CONFIGS
    from bench.workloads import BY_NAME

    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "schema": report.SCHEMA,
        "quick": args.quick,
        "command": "python -m bench.run" + (" " + " ".join(sys.argv[1:]) if argv is None and sys.argv[1:] else ""),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "python_version": platform.python_version(),
        "machine": machine_info(),
        "load_average": {"start": _loadavg()},
    }

    if args.no_limits:
        programs = {}
    else:
        _progress("bench: measuring physical limits (bench/c) ...")
        programs = limits_mod.run_programs(args.threads, args.quick)
    results["limit_programs"] = programs
    results["limits"] = limits_mod.summarize(programs, args.threads)

    items = []
    for w in args.workload_list:
        for c in CONFIGS:
            items.append((len(items), w, c.name))
    wanted = [it for it in items if it[2] in args.config_list]
    by_item: dict[int, dict] = {}
    for idx, w, c in items:
        if c not in args.config_list:
            by_item[idx] = {"workload": w, "config": c, "status": "skipped",
                            "reason": "not selected (--configs)"}

    def on_result(idx, res):
        by_item[idx] = res
        status = res.get("status")
        extra = ""
        if status == "ok":
            extra = f" {res['median_s'] * 1e3:.3f} ms"
        elif res.get("reason"):
            extra = f" ({res['reason'][:120]})"
        _progress(f"bench: [{len(by_item)}/{len(items)}] {res['workload']} / {res['config']}: {status}{extra}")

    env = run_items(wanted, args, on_result) if wanted else {}
    info = env.get("info", {})
    avail = env.get("available", {})
    results["torch_version"] = info.get("torch_version")
    results["env"] = info
    results["threads"] = {"torch": info.get("torch_threads", args.threads), "loom": str(args.threads),
                          "omp": str(args.threads), "loom_device": info.get("loom_device_threads")}
    results["configs"] = []
    for c in CONFIGS:
        if c.name not in args.config_list:
            entry = {"available": False, "reason": "not selected (--configs)"}
        else:
            a = avail.get(c.name, {"available": False, "reason": "no worker reported on it"})
            entry = {"available": bool(a["available"]), "reason": a["reason"]}
        results["configs"].append({"name": c.name, "label": c.label, "device": c.device,
                                   "backend": c.backend, **entry})
    results["workloads"] = []
    for w in args.workload_list:
        wl = BY_NAME[w]
        res = {}
        for idx, wn, c in items:
            if wn == w:
                res[c] = by_item.get(idx, {"workload": w, "config": c, "status": "skipped",
                                           "reason": "no result"})
        results["workloads"].append({"name": w, "group": wl.group, "unit": wl.unit,
                                     "description": wl.description, "results": res})
    results["load_average"]["end"] = _loadavg()
    if not args.no_limits and wanted:
        # Bandwidth on a shared machine drifts: measure again after the
        # workloads and judge them against the best of both runs.
        _progress("bench: measuring physical limits again (bench/c) ...")
        results["limit_programs_end"] = limits_mod.run_programs(args.threads, args.quick)
        results["limits"] = limits_mod.summarize(programs, args.threads,
                                                 results["limit_programs_end"])
    report.derive(results)
    results["headline"] = report.headline(results)
    results["elapsed_s"] = time.monotonic() - t_start

    problems = report.validate(results)
    if problems:
        _progress("bench: results.json is malformed:\n  " + "\n  ".join(problems))
    report.write_json(results, args.out / "results.json")
    report.write_markdown(results, args.out / "RESULTS.md")
    try:
        report.write_chart(results, args.out / "results.png")
    except Exception as exc:  # the numbers matter more than the picture
        _progress(f"bench: chart not written: {type(exc).__name__}: {exc}")
        return 1
    for c in results["configs"]:
        h = results["headline"][c["name"]]
        g = f"{h['geomean_ratio']:.2f}x" if h["geomean_ratio"] else "n/a"
        _progress(f"bench: {c['name']:<13} geomean ratio vs CPU eager {g} over {h['workloads']} workloads"
                  + ("" if c["available"] else f"  [not available: {c['reason']}]"))
    _progress(f"bench: wrote {args.out}/results.json, RESULTS.md, results.png "
              f"in {results['elapsed_s']:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
