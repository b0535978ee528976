"""A stream's queue holds at most LOOM_QUEUE_DEPTH pending commands (default
1024): a Python thread that submits to a full queue waits, without the GIL,
until the stream drains, so an unsynchronized loop keeps its memory bounded
and other Python threads run meanwhile. Each check runs in a fresh process
(the depth is read at start-up; a deadlock ends in the subprocess's
timeout, not the suite's)."""

import pytest

from conftest import run_python

# The main thread fills a held stream; a second thread sees it wait (the
# stream's count of waits), runs Python meanwhile, then releases the stream.
# With the GIL held during the wait, the second thread could never run and
# the process would hang. `step(x)` adds 1 to x: torch's binding of add_
# calls the op without the GIL; a torch_loom.tile kernel launches from
# Python holding it, so only the queue's own wait can release it.
BLOCKED_THREAD = """
import os, shutil, sys, tempfile, threading, time
import torch, torch_loom
from torch_loom import _C

# tile.jit reads its kernel's source from a file.
KERNEL = \'\'\'
import torch_loom.tile as tl

@tl.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
\'\'\'

if os.environ["STEP"] == "tile":
    where = tempfile.mkdtemp()
    with open(os.path.join(where, "queue_depth_kernel.py"), "w") as f:
        f.write(KERNEL)
    sys.path.insert(0, where)
    from queue_depth_kernel import add_one  # its source read at definition
    shutil.rmtree(where)

    def step(x):
        add_one[(1,)](x, 16, BLOCK=16)
else:
    def step(x):
        x.add_(1)

depth = int(os.environ.get("LOOM_QUEUE_DEPTH", "1024"))
s = torch.loom.current_stream()
x = torch.zeros(16, device="loom")
step(x)  # compiled, if a kernel, before the stream is held
torch.loom.synchronize()
x.zero_()
launched = 0
seen = {}

def helper():
    deadline = time.monotonic() + 60
    while s.queue_waits() == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    seen["waits"] = s.queue_waits()
    seen["launched"] = launched
    steps = 0
    for _ in range(100):  # Python work while the main thread waits
        steps += 1
        time.sleep(0.001)
    seen["steps"] = steps
    seen["launched_after"] = launched
    _C._release_held_streams()

_C._hold_stream(s)  # the stream's first pending command, until released
t = threading.Thread(target=helper)
t.start()
for _ in range(3 * depth):
    step(x)
    launched += 1
t.join()
torch.loom.synchronize()
assert seen["waits"] >= 1, seen
# The hold takes one place: depth - 1 launches fit behind it, no more.
assert seen["launched"] == depth - 1, (seen, depth)
assert seen["launched_after"] == depth - 1, seen  # still waiting after the helper's work
assert seen["steps"] == 100, seen
assert torch.equal(x.cpu(), torch.full((16,), 3.0 * depth)), x
print("ok", seen)
"""


@pytest.mark.parametrize("step", ["add_", "tile"])
def test_full_queue_waits_without_the_gil(step):
    out = run_python(BLOCKED_THREAD, env={"LOOM_QUEUE_DEPTH": "64", "STEP": step}, timeout=120).stdout
    assert out.startswith("ok"), out


def test_default_depth_bounds_a_held_stream():
    out = run_python(BLOCKED_THREAD, env={"STEP": "add_"}, timeout=120).stdout
    assert out.startswith("ok"), out


# Products slower to run than to enqueue, never synchronized: unbounded, each
# pending launch keeps its copy in the queue (about 1 KB; 30000 of them took
# RSS up by 56 MiB where the bounded queue took 3).
UNSYNCHRONIZED_LOOP = """
import torch, torch_loom

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

w = torch.randn(128, 128, device="loom")
y = w @ w
torch.loom.synchronize()
start = peak = rss_mib()
for i in range(30000):
    y = w @ w
    if i % 500 == 0:
        peak = max(peak, rss_mib())
peak = max(peak, rss_mib())
torch.loom.synchronize()
assert torch.allclose(y.cpu(), w.cpu() @ w.cpu(), rtol=1e-4, atol=1e-4)
print(f"growth {peak - start:.1f} waits {torch.loom.current_stream().queue_waits()}")
"""


def test_unsynchronized_loop_keeps_memory_bounded():
    out = run_python(UNSYNCHRONIZED_LOOP, timeout=300).stdout.split()
    growth, waits = float(out[1]), int(out[3])
    assert waits > 0, out
    assert growth < 25, f"RSS grew {growth} MiB over 30000 unsynchronized launches"


# A kernel that fails asynchronously, behind a queue that fills: the error
# still surfaces (at a later launch on the stream or the synchronize), named.
ASYNC_ERROR = """
import torch, torch_loom
from torch_loom import _C

x = torch.zeros(1 << 16, device="loom")
w = torch.randn(128, 128, device="loom")
_C._enqueue_failing_kernel(x)
try:
    for _ in range(200):
        w @ w
    torch.loom.synchronize()
except RuntimeError as e:
    assert "loom_test_fault" in str(e), e
    torch.loom.synchronize()  # the error was taken: the stream goes on
    x.add_(1)
    assert torch.equal(x.cpu(), torch.ones(1 << 16))
    print("raised")
else:
    print("no error")
"""


def test_async_error_surfaces_behind_a_full_queue():
    out = run_python(ASYNC_ERROR, env={"LOOM_QUEUE_DEPTH": "8"}, timeout=120).stdout
    assert out.strip() == "raised", out
