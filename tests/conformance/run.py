"""Command line of the conformance sweep.

    python -m tests.conformance.run --full                 # every op: REPORT.md, results.json
    python -m tests.conformance.run --full --update-expected
    python -m tests.conformance.run --fast --check         # the ratchet of `make test`
    python -m tests.conformance.run --ops add,mul --dtypes float32 --device cpu

--check exits 1 if a pair of the expectation file is no longer a native pass
or any pair gives a wrong result. --update-expected rewrites the expectation
file: pairs that ran are listed iff they passed natively, others are kept.
"""

import argparse
import json
import os
import sys
import time

# Run as a program, this process only plans and reports; the device is
# loaded in the workers. Imported (by the tests), it leaves the environment
# of its importer alone.
if __name__ == "__main__":
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from . import catalog, fast, report, runner  # noqa: E402

OUT_DIR = os.path.join(runner.REPO, "conformance")
EXPECTED = os.path.join(OUT_DIR, "expected_native.txt")
RESULTS = os.path.join(OUT_DIR, "results.json")
REPORT = os.path.join(OUT_DIR, "REPORT.md")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--full", action="store_true", help="every OpInfo of op_db")
    what.add_argument("--fast", action="store_true", help="the fast subset of `make test`")
    what.add_argument("--ops", help="comma-separated OpInfo full names")
    ap.add_argument("--dtypes", help="comma-separated subset of: " + ",".join(catalog.DTYPES))
    ap.add_argument("--device", default="loom", help="device under test (default loom; cpu tests the harness)")
    ap.add_argument("--max-samples", type=int, default=8, help="samples per OpInfo and variant")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--chunk-size", type=int, default=0, help="items per worker process (default: two chunks a job, each of every n-th item)")
    ap.add_argument("--timeout", type=int, default=90, help="seconds before an item counts as hung")
    ap.add_argument("--json", help="write results here (default with --full: conformance/results.json)")
    ap.add_argument("--report", help="write the Markdown report here (default with --full: conformance/REPORT.md)")
    ap.add_argument("--expected", default=EXPECTED, help="the expectation file")
    ap.add_argument("--update-expected", action="store_true", help="rewrite the expectation file from this run")
    ap.add_argument("--check", action="store_true", help="exit 1 on a regression of the expectation file or a fail")
    return ap.parse_args(argv)


def plan(args):
    dtypes = args.dtypes.split(",") if args.dtypes else None
    if dtypes:
        unknown = [d for d in dtypes if d not in catalog.DTYPES]
        if unknown:
            raise SystemExit("unknown dtype(s): %s" % ", ".join(unknown))
    if args.fast:
        pairs = fast.fast_pairs(report.read_expected(args.expected), RESULTS)
        if dtypes:
            pairs = [p for p in pairs if p[1] in dtypes]
        return pairs, {}
    ops = args.ops.split(",") if args.ops else None
    return catalog.work_items(ops=ops, dtypes=dtypes)


def main(argv=None):
    args = parse_args(argv)
    if args.full:
        args.json = args.json or RESULTS
        args.report = args.report or REPORT
    items, not_run = plan(args)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    log("conformance: %d (op, dtype) pairs on %s, %d jobs, up to %d samples per variant"
        % (len(items), args.device, args.jobs, args.max_samples))
    for name, why in sorted(not_run.items()):
        log("conformance: not run: %s: %s" % (name, why))
    start = time.monotonic()
    try:
        results = runner.run_items(
            items, args.device, jobs=args.jobs, chunk_size=args.chunk_size,
            max_samples=args.max_samples, item_timeout=args.timeout, log=log,
        )
    except runner.WorkerStartupError as exc:
        log("conformance: %s" % exc)
        return 2
    seconds = time.monotonic() - start
    meta = report.meta_for(args.device, args.max_samples, args.jobs, args.timeout, seconds, runner.REPO)
    if args.json:
        report.write_json(args.json, results, not_run, meta)
    if args.report:
        report.write_markdown(args.report, results, not_run, meta)
    print(report.summary_line(results, not_run) + " [%.0f s]" % seconds, flush=True)

    expected = report.read_expected(args.expected)
    if args.update_expected:
        new = report.updated_expected(expected, results)
        report.write_expected(args.expected, new)
        log("conformance: %s: %d pairs (+%d, -%d)" % (
            os.path.relpath(args.expected, runner.REPO), len(new), len(new - expected), len(expected - new)))
    if args.check:
        regressions, fails = report.ratchet(expected, results)
        for r in regressions:
            print("REGRESSION %s %s: %s (expected native)%s" % (
                r["op"], r["dtype"], r["status"],
                ": " + (r.get("message") or json.dumps(r.get("fallback_ops", {}))) if r["status"] != "native" else ""))
        for r in fails:
            print("FAIL %s %s: %s" % (r["op"], r["dtype"], r.get("message", "")))
        if regressions or fails:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
