"""Derived figures and the three outputs: results.json, RESULTS.md, results.png.

Headline figures are ratios: each configuration's throughput over CPU eager's
on the same workload, measured in the same run. Absolute times are kept in
the JSON (and shown for CPU eager, as the reference) but never compared
across runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.harness import BASELINE, CONFIGS

SCHEMA = 1
STATUSES = {"ok", "error", "unavailable", "crashed", "timeout", "skipped"}


def derive(results: dict) -> None:
    """Adds per-item throughput, ratio to CPU eager and percent of limit."""
    limits = results.get("limits", {})
    for w in results["workloads"]:
        base = w["results"].get(BASELINE, {})
        base_t = base.get("median_s") if base.get("status") == "ok" else None
        for r in w["results"].values():
            if r.get("status") != "ok" or not r.get("median_s"):
                continue
            t = r["median_s"]
            items = r.get("items") or 1
            r["seconds_per_item"] = t / items
            r["throughput"] = items / t
            if base_t:
                r["ratio_vs_cpu_eager"] = base_t / t
            limit = limits.get(r.get("limit") or "")
            # The limits are the best of many trials: each workload's best
            # sample is set against them too, next to its median.
            best = r.get("min_s") or t
            for key, work, unit in (("gflops", r.get("flops"), "GFLOP/s"),
                                    ("gbps", r.get("bytes"), "GB/s")):
                if not work:
                    continue
                r[key] = work / t * 1e-9
                if limit and limit["unit"] == unit:
                    r["percent_of_limit"] = 100.0 * r[key] / limit["value"]
                    r["percent_of_limit_best"] = 100.0 * work / best * 1e-9 / limit["value"]
                break


def headline(results: dict) -> dict:
    """Geometric mean over workloads of each configuration's ratio to CPU
    eager, over the workloads where it ran."""
    out = {}
    for c in CONFIGS:
        ratios = [w["results"][c.name]["ratio_vs_cpu_eager"] for w in results["workloads"]
                  if w["results"].get(c.name, {}).get("ratio_vs_cpu_eager")]
        out[c.name] = {
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "workloads": len(ratios),
        }
    return out


def validate(results: dict) -> list[str]:
    """Problems with the structure of a results.json (empty when well formed)."""
    problems = []
    for key in ("schema", "quick", "machine", "torch_version", "threads", "limits", "configs",
                "workloads", "headline"):
        if key not in results:
            problems.append(f"missing top-level key {key!r}")
    if problems:
        return problems
    names = [c["name"] for c in results["configs"]]
    if names != [c.name for c in CONFIGS]:
        problems.append(f"configs {names}")
    for c in results["configs"]:
        if not isinstance(c.get("available"), bool):
            problems.append(f"config {c.get('name')}: 'available' is not a bool")
        if c.get("available") is False and not c.get("reason"):
            problems.append(f"config {c.get('name')}: unavailable without a reason")
    for w in results["workloads"]:
        for key in ("name", "group", "unit", "description", "results"):
            if key not in w:
                problems.append(f"workload {w.get('name')}: missing {key!r}")
        for cname in names:
            r = w.get("results", {}).get(cname)
            if r is None:
                problems.append(f"{w.get('name')}/{cname}: no result")
                continue
            st = r.get("status")
            if st not in STATUSES:
                problems.append(f"{w['name']}/{cname}: bad status {st!r}")
            elif st == "ok":
                for key in ("median_s", "samples_s", "first_call_s", "throughput"):
                    if not isinstance(r.get(key), (int, float, list)):
                        problems.append(f"{w['name']}/{cname}: missing {key}")
                if not (isinstance(r.get("median_s"), (int, float)) and r["median_s"] > 0):
                    problems.append(f"{w['name']}/{cname}: median_s not positive")
                if cname == BASELINE and r.get("ratio_vs_cpu_eager") != 1.0:
                    problems.append(f"{w['name']}/{cname}: baseline ratio is not 1")
            elif not r.get("reason"):
                problems.append(f"{w['name']}/{cname}: status {st} without a reason")
    return problems


# ---- outputs -----------------------------------------------------------------------

def write_json(results: dict, path: Path) -> None:
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")


def _fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _cell(r: dict) -> str:
    st = r.get("status")
    if st == "ok":
        ratio = r.get("ratio_vs_cpu_eager")
        txt = f"{ratio:.2f}x" if ratio else "ok"
        if r.get("check", {}).get("status") == "mismatch":
            txt += " ⚠"
        return txt
    return {"unavailable": "n/a", "error": "error", "crashed": "crash", "timeout": "timeout",
            "skipped": "skipped"}.get(st, str(st))


def write_markdown(results: dict, path: Path) -> None:
    m = results["machine"]
    th = results["threads"]
    lines = ["# TorchLoom benchmark results", ""]
    lines.append(f"Produced by `{results['command']}` on {results['date']} "
                 f"(commit {results.get('commit') or 'unknown'}); took {results['elapsed_s']:.0f} s."
                 + (" **Quick mode: tiny sizes, single calls — not a measurement.**" if results["quick"] else ""))
    lines += ["", "## Machine", ""]
    lines.append(f"- CPU: {m['cpu_model']}, {m['cores']} cores ({m['logical_cpus']} logical CPUs)"
                 + (f", L3 {m['l3']}" if m.get("l3") else ""))
    lines.append(f"- ISA flags: {', '.join(m['isa_flags']) or 'none of note'}"
                 f" (all {len(m['flags'])} flags are in results.json)")
    lines.append(f"- Memory: {m.get('memory_gib', '?')} GiB; OS: {m.get('os', '?')}")
    lines.append(f"- PyTorch {results['torch_version']} (CPU capability {results['env'].get('cpu_capability')}), "
                 f"Python {results['python_version']}")
    lines.append(f"- Threads: torch.set_num_threads({th['torch']}), LOOM_NUM_THREADS={th['loom']}, "
                 f"OMP_NUM_THREADS={th['omp']}"
                 + (f"; loom device reports {th['loom_device']} worker threads" if th.get("loom_device") else ""))
    la = results.get("load_average", {})
    if la.get("start") is not None:
        lines.append(f"- Load average (1 min) at start / end of the run: {la['start']} / {la.get('end')} "
                     f"(other work on the machine lowers absolute figures; ratios within one run "
                     f"are less affected)")
    lines += ["", "## Configurations", ""]
    for c in results["configs"]:
        state = "available" if c["available"] else f"**not available**: {c['reason']}"
        lines.append(f"- `{c['name']}` — {c['label']}: {state}")

    lines += ["", "## Headline: throughput relative to CPU eager", "",
              "Geometric mean over the workloads each configuration ran (higher is better):", ""]
    for c in results["configs"]:
        h = results["headline"][c["name"]]
        g = f"{h['geomean_ratio']:.2f}x" if h["geomean_ratio"] else "—"
        lines.append(f"- {c['label']}: **{g}** over {h['workloads']} workloads")

    lines += ["", "## Physical limits (measured by bench/c)", ""]
    lines += ["| limit | value | measured by |", "|---|---|---|"]
    for name, lim in results["limits"].items():
        lines.append(f"| {name} | {lim['value']:.1f} {lim['unit']} | {lim['source']} |")
    runs = [("start", results.get("limit_programs", {}))]
    if results.get("limit_programs_end"):
        runs.append(("end", results["limit_programs_end"]))
    for when, programs in runs:
        for prog, data in programs.items():
            if data.get("error"):
                lines.append(f"\n{prog} ({when}): {data['error']}")

    def cell(r, key, unit):
        if r is None:
            return "—"
        return f"{r[key]:.1f} {unit}" if r.get("available") else f"n/a ({r.get('reason')})"

    rows = []
    for prog, key, unit in (("peak_fma", "gflops", "GFLOP/s"), ("stream_bw", "gbps", "GB/s")):
        first = runs[0][1].get(prog, {}).get("results", [])
        later = {(r["kernel"], r["threads"]): r
                 for _, p in runs[1:] for r in p.get(prog, {}).get("results", [])}
        for r in first:
            name = r["kernel"] if prog == "peak_fma" else f"stream {r['kernel']}"
            rows.append([name, str(r["threads"]), cell(r, key, unit)]
                        + ([cell(later.get((r["kernel"], r["threads"])), key, unit)]
                           if len(runs) > 1 else []))
    if rows:
        head = ["microbenchmark", "threads", "at start"] + (["at end"] if len(runs) > 1 else [])
        lines += ["", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]

    names = [c["name"] for c in results["configs"]]
    lines += ["", "## Ratios per workload", "",
              "Throughput over CPU eager (higher is better); the CPU eager column is its median time "
              "per work item. ⚠ marks an output that differs from CPU eager beyond tolerance.", ""]
    lines.append("| workload | CPU eager | " + " | ".join(n for n in names if n != BASELINE) + " |")
    lines.append("|---" * len(names) + "|---|")
    for w in results["workloads"]:
        base = w["results"][BASELINE]
        ref = (_fmt_time(base["seconds_per_item"]) + f"/{w['unit']}") if base.get("status") == "ok" else _cell(base)
        row = [f"`{w['name']}`", ref] + [_cell(w["results"][n]) for n in names if n != BASELINE]
        lines.append("| " + " | ".join(row) + " |")

    lines += ["", "## Percent of the physical limit", "",
              "GFLOP/s against peak FMA (fp32 or bf16), GB/s against streaming bandwidth "
              "(triad for add, read for sum, copy for softmax/layer_norm), at the thread count above: "
              "the median sample, then the best sample (the limits are best trials), and the rate "
              "at the median. A convolution's FLOPs are the direct method's; a configuration "
              "that takes a faster algorithm (loom's Winograd for 3x3 windows) can pass 100%.", ""]
    lines.append("| workload | limit | " + " | ".join(names) + " |")
    lines.append("|---|---" + "|---" * len(names) + "|")
    for w in results["workloads"]:
        lim = next((r.get("limit") for r in w["results"].values() if r.get("limit")), None)
        if lim is None:
            continue
        cells = []
        for n in names:
            r = w["results"][n]
            if r.get("percent_of_limit") is not None:
                ach = f"{r['gflops']:.1f} GFLOP/s" if "gflops" in r else f"{r['gbps']:.1f} GB/s"
                best = r.get("percent_of_limit_best")
                cells.append(f"{r['percent_of_limit']:.1f}%"
                             + (f" / {best:.1f}%" if best is not None else "") + f" ({ach})")
            elif r.get("status") == "ok" and ("gflops" in r or "gbps" in r):
                cells.append(f"{r.get('gflops', r.get('gbps')):.1f}")
            else:
                cells.append(_cell(r) if r.get("status") != "ok" else "—")
        lines.append(f"| `{w['name']}` | {lim} | " + " | ".join(cells) + " |")

    extras = [(w, n, w["results"][n]["extra"]) for w in results["workloads"] for n in names
              if w["results"][n].get("extra")]
    if extras:
        lines += ["", "## Phases", "",
                  "Median time of each phase of a call; in parentheses, CPU eager's time over "
                  "the configuration's (higher is better).", ""]
        for w in results["workloads"]:
            have = [n for n in names if w["results"][n].get("extra")]
            if not have:
                continue
            base = w["results"].get(BASELINE, {}).get("extra") or {}
            keys = list(w["results"][have[0]]["extra"])
            lines += [f"`{w['name']}`:", "", "| phase | " + " | ".join(have) + " |",
                      "|---|" + "---|" * len(have)]
            for key in keys:
                cells = []
                for n in have:
                    v = w["results"][n]["extra"].get(key)
                    if v is None:
                        cells.append("—")
                    elif n != BASELINE and base.get(key):
                        cells.append(f"{_fmt_time(v)} ({base[key] / v:.2f}x)")
                    else:
                        cells.append(_fmt_time(v))
                lines.append(f"| {key} | " + " | ".join(cells) + " |")
            lines.append("")

    problems = []
    for w in results["workloads"]:
        for n in names:
            r = w["results"][n]
            if r.get("status") not in ("ok", "unavailable"):
                problems.append(f"- `{w['name']}` / {n}: {r['status']}"
                                + (f" ({r['stage']})" if r.get("stage") else "") + f": {r.get('reason')}")
            elif r.get("check", {}).get("status") == "mismatch":
                c = r["check"]
                problems.append(f"- `{w['name']}` / {n}: output differs from CPU eager "
                                f"({c.get('detail') or 'rel. error %.2e > %.0e' % (c['rel_err'], c['tol'])})")
    if problems:
        lines += ["", "## Not available, failures and mismatches", ""] + problems

    fallbacks = {}
    for w in results["workloads"]:
        for n in names:
            for op, count in (w["results"][n].get("fallback_ops") or {}).items():
                fallbacks.setdefault(op, set()).add(w["name"])
    if fallbacks:
        lines += ["", "## Ops that ran through the CPU fallback on loom", ""]
        for op, ws in sorted(fallbacks.items()):
            lines.append(f"- `{op}`: {', '.join(sorted(ws))}")

    lines += ["", "## Workloads", ""]
    for w in results["workloads"]:
        lines.append(f"- `{w['name']}`: {w['description']} (work item: {w['unit']})")
    lines += ["", "Method: every configuration runs in the same process run, after warm-up (the first "
              "call, which includes compilation, is reported separately in results.json); the figure is "
              "the median of repeated samples with the device synchronized before and after each sample.",
              ""]
    path.write_text("\n".join(lines))


def write_chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = [c for c in results["configs"] if c["name"] != BASELINE]
    workloads = results["workloads"]
    n = len(workloads)
    height = 0.8 / max(len(configs), 1)
    fig, ax = plt.subplots(figsize=(10, 1.8 + 0.42 * n))
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    ymax = n - 1
    for ci, c in enumerate(configs):
        for wi, w in enumerate(workloads):
            r = w["results"][c["name"]]
            y = ymax - wi + (len(configs) / 2 - ci - 0.5) * height
            ratio = r.get("ratio_vs_cpu_eager")
            if ratio:
                ax.barh(y, ratio, height=height, color=colors[ci % len(colors)])
                ax.text(ratio, y, f" {ratio:.2f}", va="center", fontsize=6)
            else:
                ax.text(1.0, y, f" {_cell(r)}", va="center", fontsize=6, color="gray")
    # one legend entry per configuration, unavailable ones included
    from matplotlib.patches import Patch

    handles = [Patch(color=colors[i % len(colors)],
                     label=c["label"] + ("" if c["available"] else " (not available)"))
               for i, c in enumerate(configs)]
    fig_h = fig.get_size_inches()[1]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.35 / fig_h), ncol=2,
               fontsize=8, frameon=False)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks([ymax - i for i in range(n)])
    ax.set_yticklabels([w["name"] for w in workloads], fontsize=8)
    ax.set_xlabel("throughput relative to CPU eager (log scale; 1 = CPU eager)")
    title = f"TorchLoom — {results['machine']['cpu_model']}, {results['threads']['torch']} threads, " \
            f"PyTorch {results['torch_version']}"
    if results["quick"]:
        title += " (quick mode)"
    fig.suptitle(title, fontsize=9, y=1 - 0.08 / fig_h)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.85 / fig_h))
    fig.savefig(path, dpi=110)
    plt.close(fig)
