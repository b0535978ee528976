"""A worker process: run a list of (op, dtype) items, one JSON line per event.

    python -m tests.conformance.worker --device loom --items items.json --results out.jsonl

Before each item it writes {"event": "start", ...} and after it the result
({"event": "result", ...}); the runner reads the file as it grows, so a crash
or a hang loses only the item in flight. Lines are flushed one by one.

Test hooks (for the harness's own tests): LOOM_CONFORMANCE_CRASH=op aborts the
process when that op starts, LOOM_CONFORMANCE_HANG=op sleeps forever there
(comma-separated; an entry `op:dtype` names one pair).
"""

import argparse
import json
import os
import sys
import time
import warnings

CRASH_ENV = "LOOM_CONFORMANCE_CRASH"
HANG_ENV = "LOOM_CONFORMANCE_HANG"


def _names(env):
    return {s.strip() for s in os.environ.get(env, "").split(",") if s.strip()}


def _open_device(device):
    import torch

    kind = device.split(":")[0]
    if kind not in ("cpu", "meta") and not hasattr(torch, kind):
        # The planning process turns autoload off (TORCH_DEVICE_BACKEND_AUTOLOAD=0)
        # and workers inherit that: load the backend by its package name.
        import importlib

        importlib.import_module("torch_%s" % kind)
    torch.empty(1, device=device)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True)
    ap.add_argument("--items", required=True, help="JSON file: [[op, dtype], ...]")
    ap.add_argument("--results", required=True, help="JSON-lines output, appended")
    ap.add_argument("--max-samples", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(args.threads)
    _open_device(args.device)
    from . import catalog, compare

    catalog.op_db()
    crash, hang = _names(CRASH_ENV), _names(HANG_ENV)
    with open(args.items) as f:
        items = json.load(f)
    with open(args.results, "a", buffering=1) as out:
        for op_name, dtype_name in items:
            out.write(json.dumps({"event": "start", "op": op_name, "dtype": dtype_name}) + "\n")
            out.flush()
            if {op_name, "%s:%s" % (op_name, dtype_name)} & crash:
                os.abort()
            if {op_name, "%s:%s" % (op_name, dtype_name)} & hang:
                time.sleep(10**6)
            result = compare.run_item(op_name, dtype_name, args.device, args.max_samples)
            result["event"] = "result"
            out.write(json.dumps(result) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
