"""Run work items in chunks over worker processes.

A chunk is a list of (op, dtype) items handed to one worker process. If the
worker dies (signal, non-zero exit) or an item runs past the timeout, the item
in flight is recorded as a crash and a fresh worker runs the rest of the
chunk: a crash costs one item, never the sweep.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLL_S = 0.05
STARTUP_TIMEOUT_S = 300


class WorkerStartupError(RuntimeError):
    """A worker died before running any item: nothing would ever run."""


def worker_env(device, threads):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    if device.split(":")[0] == "cpu":
        # A CPU-against-CPU run must not depend on any device backend loading.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    # Workers share the cores: one compute thread each, on both sides.
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LOOM_NUM_THREADS"):
        env.setdefault(key, str(threads))
    # Fallbacks are counted through torch.loom.fallback_ops(), not by warnings.
    env.setdefault("LOOM_FALLBACK", "silent")
    return env


def _tail(path, lines=6):
    try:
        with open(path, errors="replace") as f:
            text = f.read()[-4000:]
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _crash(op, dtype, message):
    return {"op": op, "dtype": dtype, "status": "crash", "message": message[:600]}


class ChunkRunner:
    def __init__(self, device, max_samples, item_timeout, threads, workdir, log=None):
        self.device = device
        self.max_samples = max_samples
        self.item_timeout = item_timeout
        self.threads = threads
        self.workdir = workdir
        self.log = log or (lambda msg: None)
        self.env = worker_env(device, threads)
        self._serial = 0
        self._lock = threading.Lock()
        self.finished = 0  # items with a result so far, for progress lines

    def _paths(self):
        with self._lock:
            self._serial += 1
            n = self._serial
        base = os.path.join(self.workdir, "w%05d" % n)
        return base + ".items.json", base + ".results.jsonl", base + ".stderr"

    def _attempt(self, items):
        """Run items in one worker. Returns (results, crashed_result or None)."""
        items_path, results_path, err_path = self._paths()
        with open(items_path, "w") as f:
            json.dump([list(i) for i in items], f)
        cmd = [
            sys.executable, "-m", "tests.conformance.worker",
            "--device", self.device, "--items", items_path, "--results", results_path,
            "--max-samples", str(self.max_samples), "--threads", str(self.threads),
        ]
        open(results_path, "w").close()
        with open(err_path, "w") as err:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env, stdout=err, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        results, current, started_at = [], None, time.monotonic()
        offset, pending = 0, ""
        launched = time.monotonic()
        timed_out = None
        while True:
            rc = proc.poll()
            with open(results_path) as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                if not line.strip():
                    continue
                ev = json.loads(line)
                if ev.pop("event") == "start":
                    current, started_at = (ev["op"], ev["dtype"]), time.monotonic()
                else:
                    results.append(ev)
                    current = None
                    with self._lock:
                        self.finished += 1
            if rc is not None:
                break
            now = time.monotonic()
            if current is not None and now - started_at > self.item_timeout:
                timed_out = "timeout: no result after %ds" % self.item_timeout
            elif current is None and not results and now - launched > STARTUP_TIMEOUT_S:
                timed_out = "timeout: the worker did not start within %ds" % STARTUP_TIMEOUT_S
            if timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(POLL_S)
        rc = proc.returncode
        done = {(r["op"], r["dtype"]) for r in results}
        if timed_out is None and rc == 0 and len(done) == len(items):
            return results, None
        if current is None and not results and not timed_out:
            raise WorkerStartupError(
                "the conformance worker failed before its first item (%s): %s"
                % ("exit status %d" % rc, _tail(err_path, 12))
            )
        if current is None:
            # Died between items or before the first: blame the next one, so
            # that the rest of the chunk still makes progress.
            current = next(i for i in items if tuple(i) not in done)
        if timed_out:
            why = timed_out
        elif rc < 0:
            why = "killed by signal %s" % signal.Signals(-rc).name
        else:
            why = "worker exited with status %d" % rc
        tail = _tail(err_path)
        return results, _crash(current[0], current[1], why + (" -- " + tail if tail else ""))

    def run_chunk(self, items):
        """All results for `items`, re-running the rest after each crash."""
        remaining, out = [tuple(i) for i in items], []
        while remaining:
            results, crashed = self._attempt(remaining)
            out.extend(results)
            done = {(r["op"], r["dtype"]) for r in results}
            if crashed is None:
                break
            out.append(crashed)
            with self._lock:
                self.finished += 1
            self.log("crash: %s %s: %s" % (crashed["op"], crashed["dtype"], crashed["message"][:200]))
            done.add((crashed["op"], crashed["dtype"]))
            remaining = [i for i in remaining if i not in done]
        return out


def chunked(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_items(items, device, jobs=2, chunk_size=None, max_samples=10, item_timeout=90,
              threads=1, log=None, progress_every=30):
    """Results for every item, from `jobs` worker processes in parallel."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if chunk_size:
        chunks = chunked(list(items), chunk_size)
    else:
        # A worker start costs about 5 s of CPU (torch and op_db imports):
        # two chunks a job, each taking every n-th item so that the chunks
        # cost about the same and the workers finish close together.
        n = max(1, min(2 * max(1, jobs), -(-len(items) // 20)))
        chunks = [c for c in (list(items)[i::n] for i in range(n)) if c]
    todo = queue.Queue()
    for c in chunks:
        todo.put(c)
    results, lock = [], threading.Lock()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loom-conformance-") as workdir:
        runner = ChunkRunner(device, max_samples, item_timeout, threads, workdir, log)

        failures = []

        def serve():
            while not failures:
                try:
                    c = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    got = runner.run_chunk(c)
                except WorkerStartupError as exc:
                    failures.append(exc)
                    return
                with lock:
                    results.extend(got)

        threads_ = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, jobs))]
        for t in threads_:
            t.start()
        last = time.monotonic()
        while any(t.is_alive() for t in threads_):
            time.sleep(0.5)
            if time.monotonic() - last >= progress_every:
                last = time.monotonic()
                n = runner.finished
                log("conformance: %d/%d items, %.0fs" % (n, len(items), last - start))
        for t in threads_:
            t.join()
    if failures:
        raise failures[0]
    return results
