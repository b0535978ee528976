"""results.json, REPORT.md and the native-pass expectation file."""

import collections
import json
import os
import subprocess

from . import catalog

STATUSES = ("native", "fallback", "fail", "error", "crash")
LABELS = {
    "native": "native pass",
    "fallback": "fallback pass",
    "fail": "fail",
    "error": "error",
    "crash": "crash",
    "skipped": "not run",
}
CELL = {
    "native": "N",
    "fallback": "F",
    "fail": "**X**",
    "error": "E",
    "crash": "**C**",
    "skipped": "S",
}
EXPECTED_HEADER = """\
# (op, dtype) pairs of PyTorch's op_db that pass natively on loom: correct, and
# no ATen op fell back to the CPU. `make test` fails if one of them regresses.
# Rewrite from a run: `make conformance-update` (full sweep) or
# `python -m tests.conformance.run --ops OP[,OP] --update-expected` (merges).
# Format: <OpInfo full name> <dtype>
"""


def counts(results):
    c = collections.Counter(r["status"] for r in results)
    return {s: c.get(s, 0) for s in (*STATUSES, "skipped")}


def summary_line(results, not_run_ops=()):
    c = counts(results)
    total = sum(c[s] for s in STATUSES)
    line = "native pass %d / fallback pass %d / fail %d / error %d / crash %d out of %d (op, dtype) pairs" % (
        c["native"], c["fallback"], c["fail"], c["error"], c["crash"], total,
    )
    extra = []
    if c["skipped"]:
        extra.append("%d pairs not run" % c["skipped"])
    if not_run_ops:
        extra.append("%d ops not run" % len(not_run_ops))
    if extra:
        line += "; " + ", ".join(extra) + " (reasons below)"
    return line


def _git_commit(repo):
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
            text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def write_json(path, results, not_run_ops, meta):
    ordered = sorted(results, key=_order_key)
    doc = {
        "meta": meta,
        "summary": {"line": summary_line(results, not_run_ops), **counts(results)},
        "not_run_ops": dict(sorted(not_run_ops.items())),
        "results": ordered,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


def load_json(path):
    with open(path) as f:
        return json.load(f)


def _order_key(r):
    names = list(catalog.DTYPES)
    d = names.index(r["dtype"]) if r["dtype"] in names else len(names)
    return (r["op"], d)


def _one_line(text, n=220):
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 3] + "..."


def write_markdown(path, results, not_run_ops, meta):
    by_op = collections.defaultdict(dict)
    for r in results:
        by_op[r["op"]][r["dtype"]] = r
    dtypes = list(catalog.DTYPES)
    c = counts(results)
    lines = [
        "# Operator conformance: loom against the CPU",
        "",
        "**Summary: %s.**" % summary_line(results, not_run_ops),
        "",
        "| status | pairs |",
        "|---|---|",
    ]
    for s in (*STATUSES, "skipped"):
        lines.append("| %s | %d |" % (LABELS[s], c[s]))
    lines += [
        "",
        "Every OpInfo of PyTorch's `op_db` (torch %s, %d OpInfos) crossed with the dtypes the"
        " CPU supports among %s. Each pair runs the OpInfo's own sample inputs, generated on"
        " the CPU and copied exactly (sizes, strides) to `%s`: the forward, the gradients of every"
        " input (where the OpInfo supports autograd for the dtype), and the in-place and `out=`"
        " variants where the OpInfo has them. Results are compared with"
        " `torch.testing.assert_close` at the loosest of its default tolerances for the dtype"
        " and the OpInfo's own `toleranceOverride`s; where the OpInfo declares the device-vs-CPU"
        " comparison meaningless (non-deterministic outputs) only shapes and dtypes are compared."
        % (meta.get("torch", "?"), meta.get("opinfos", 0), ", ".join(dtypes), meta.get("device", "?")),
        "",
        "- **native pass**: correct, and no ATen op fell back to the CPU "
        "(`torch.loom.fallback_ops()` unchanged across the device runs).",
        "- **fallback pass**: correct only through the CPU fallback.",
        "- **fail**: a wrong result (or a result where the CPU raised).",
        "- **error**: the device raised where the CPU succeeded (both raising is a pass).",
        "- **crash**: the worker process died or the pair ran past %ss; the rest of its chunk was rerun."
        % meta.get("item_timeout_s", "?"),
        "",
        "Sample cap: the first %d samples of each OpInfo per variant (the OpInfo yields more for"
        " some ops). Device `%s`, commit `%s`, %s, %d worker processes, %.0f s wall time."
        % (
            meta.get("max_samples", 0), meta.get("device", "?"), meta.get("commit", "?"),
            meta.get("date", "?"), meta.get("jobs", 0), meta.get("seconds", 0),
        ),
        "",
        "## By dtype",
        "",
        "| dtype | pairs | native pass | native % | fallback pass | fail | error | crash |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in dtypes:
        d = counts([r for r in results if r["dtype"] == name])
        n = sum(d[s] for s in STATUSES)
        if n:
            lines.append("| %s | %d | %d | %.1f%% | %d | %d | %d | %d |" % (
                name, n, d["native"], 100.0 * d["native"] / n, d["fallback"], d["fail"],
                d["error"], d["crash"]))
    lines.append("")

    def section(title, status):
        rows = [r for r in sorted(results, key=_order_key) if r["status"] == status]
        if not rows:
            return
        lines.extend(["## %s (%d)" % (title, len(rows)), "", "| op | dtype | detail |", "|---|---|---|"])
        for r in rows:
            lines.append("| `%s` | %s | %s |" % (r["op"], r["dtype"], _one_line(r.get("message") or r.get("reason", ""))))
        lines.append("")

    section("Fails", "fail")
    section("Crashes", "crash")
    section("Errors", "error")

    fb = collections.Counter()
    for r in results:
        if r["status"] == "fallback":
            for name in r.get("fallback_ops", {}):
                fb[name] += 1
    if fb:
        lines += [
            "## ATen ops behind the fallback passes",
            "",
            "How many fallback-pass pairs each ATen op fell back in (a native kernel for the"
            " top ones moves the most pairs to native).",
            "",
            "| ATen op | pairs |",
            "|---|---|",
        ]
        lines += ["| `%s` | %d |" % (name, n) for name, n in fb.most_common(60)]
        if len(fb) > 60:
            lines.append("| (%d more) | |" % (len(fb) - 60))
        lines.append("")

    skipped = [r for r in sorted(results, key=_order_key) if r["status"] == "skipped"]
    if not_run_ops or skipped:
        lines += ["## Not run", "", "| op | dtype | reason |", "|---|---|---|"]
        for name, why in sorted(not_run_ops.items()):
            lines.append("| `%s` | all | %s |" % (name, _one_line(why)))
        for r in skipped:
            lines.append("| `%s` | %s | %s |" % (r["op"], r["dtype"], _one_line(r.get("reason", ""))))
        lines.append("")

    metadata_only = sorted({r["op"] for r in results if str(r.get("compare", "")).startswith("shapes")})
    if metadata_only:
        lines += [
            "## Compared by shape and dtype only",
            "",
            "The OpInfo skips the device-vs-CPU comparison for these ops (random or otherwise"
            " non-deterministic outputs): " + ", ".join("`%s`" % n for n in metadata_only) + ".",
            "",
        ]

    lines += [
        "## Per op",
        "",
        "N native pass, F fallback pass, **X** fail, E error, **C** crash, S not run"
        " (see above), `.` dtype not supported on the CPU.",
        "",
        "| op | " + " | ".join(dtypes) + " |",
        "|---|" + "---|" * len(dtypes),
    ]
    for name in sorted(set(by_op) | set(not_run_ops)):
        cells = []
        for d in dtypes:
            r = by_op.get(name, {}).get(d)
            cells.append(CELL[r["status"]] if r else ".")
        lines.append("| `%s` | %s |" % (name, " | ".join(cells)))
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def read_expected(path):
    """{(op, dtype)} listed in the expectation file (missing file: empty)."""
    out = set()
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                op, dtype = line.rsplit(None, 1)
                out.add((op, dtype))
    return out


def write_expected(path, pairs):
    names = list(catalog.DTYPES)
    rows = sorted(pairs, key=lambda p: (p[0], names.index(p[1]) if p[1] in names else 99))
    with open(path, "w") as f:
        f.write(EXPECTED_HEADER)
        for op, dtype in rows:
            f.write("%s %s\n" % (op, dtype))


def updated_expected(old, results):
    """The expectation set after a run: pairs that ran are listed iff native;
    pairs that did not run keep their old entry."""
    ran = {(r["op"], r["dtype"]) for r in results}
    native = {(r["op"], r["dtype"]) for r in results if r["status"] == "native"}
    return (old - ran) | native


def ratchet(expected, results):
    """(regressions, fails): listed pairs no longer native, and wrong results."""
    regressions = [
        r for r in results if (r["op"], r["dtype"]) in expected and r["status"] != "native"
    ]
    fails = [r for r in results if r["status"] == "fail"]
    return sorted(regressions, key=_order_key), sorted(fails, key=_order_key)


def meta_for(device, max_samples, jobs, item_timeout, seconds, repo):
    import datetime

    import torch

    return {
        "device": device,
        "torch": torch.__version__,
        "opinfos": len(catalog.op_db()),
        "max_samples": max_samples,
        "jobs": jobs,
        "item_timeout_s": item_timeout,
        "seconds": round(seconds, 1),
        "commit": _git_commit(repo),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
