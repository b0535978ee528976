"""torch_loom installs like a PyTorch extension: `pip wheel
--no-build-isolation` builds a wheel through CMake, the wheel installs into
a fresh virtual environment, and there `import torch` alone finds the loom
device from a directory outside the repository, and the JIT compiles a
kernel against the C headers the wheel carries.

The wheel reuses the repository's build/ (LOOM_BUILD_DIR), which `make
build` has already built, so its CMake step has nothing or little to do.
The fresh environment gets torch without a download: its site-packages
holds a .pth naming a directory of links to this environment's packages,
all but torch_loom's (the editable install of the repository must not be
what answers)."""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXT = "_C" + sysconfig.get_config_var("EXT_SUFFIX")


def _env(**extra):
    """This environment, less what would point the child at the repository."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOOM_", "PYTHON", "VIRTUAL_ENV"))
           and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(extra)
    return env


def _run(args, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=600, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited with {proc.returncode}\n"
                    f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc.stdout


def _build_wheel(out):
    build = REPO / "build"
    assert (build / "CMakeCache.txt").is_file(), "run `make build` first"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
          "--no-index", "-w", out, REPO], cwd=REPO, env=_env(LOOM_BUILD_DIR=str(build)))
    wheels = list(out.glob("torch_loom-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _fresh_venv(root):
    """A virtual environment of this one's base interpreter, without pip,
    seeing this environment's packages except torch_loom."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
    ours = Path(torch.__file__).resolve().parent.parent
    deps = root / "deps"
    deps.mkdir()
    for entry in ours.iterdir():
        name = entry.name
        if name.startswith(("torch_loom", "__editable__")) or name.endswith(".pth"):
            continue
        (deps / name).symlink_to(entry)
    (site / "_loom_test_deps.pth").write_text(f"{deps}\n")
    return python, site


CHECK = """
import json, sys
import torch
assert "torch_loom" in sys.modules, "import torch did not load torch_loom"
x = torch.ones(3, device="loom")
assert (x * 2).sum().item() == 6
import importlib.metadata, shutil, torch_loom
eps = [(ep.name, ep.value, str(ep.dist.locate_file("")))
       for ep in importlib.metadata.entry_points(group="torch.backends")]
# A kernel compiled at run time finds loom/kernel_abi.h in the package.
from torch_loom.compiler import jit
include = jit.include_dir()
if shutil.which("cc"):
    jit.compile('#include "loom/kernel_abi.h"\\n'
                'int twice(const loom_kernel_args *a, int64_t b, int64_t e) {\\n'
                '  float *p = a->tensors[0].data;\\n'
                '  for (int64_t i = b; i < e; ++i) p[i] *= 2;\\n'
                '  return 0;\\n'
                '}\\n', [("twice", "install.twice")])
    y = torch.ones(5, device="loom")
    jit.launch("install.twice", [y])
    assert y.sum().item() == 10
    # backend="loom" compiles against the library math the wheel carries.
    f = torch.compile(lambda a: torch.tanh(a * 3) + a.exp(), backend="loom")
    a = torch.linspace(-2, 2, 50, device="loom")
    assert torch.equal(f(a).cpu(), (torch.tanh(a * 3) + a.exp()).cpu())
    assert torch_loom.compiler.counters()["kernel_launches"] == 1
print(json.dumps({"file": torch_loom.__file__, "C": torch_loom._C.__file__,
                  "eps": eps, "path": sys.path, "include": include}))
"""


def test_wheel_installs_and_autoloads_outside_the_tree(tmp_path):
    wheel = _build_wheel(tmp_path / "wheels")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        wheel_meta = zf.read(f"{dist_info}/WHEEL").decode()
    assert {f"torch_loom/{EXT}", "torch_loom/__init__.py", "torch_loom/loom/__init__.py",
            "torch_loom/compiler/jit.py", "torch_loom/include/loom/kernel_abi.h",
            "torch_loom/include/loom/hal.h"} <= names
    assert "[torch.backends]\ntorch_loom = torch_loom:_autoload" in entry_points
    assert "[torch_dynamo_backends]\nloom = torch_loom.compiler.backend:loom_backend" in entry_points
    assert "torch_loom/include/kernels/pointwise/pointwise_exp.h" in names
    assert "Root-Is-Purelib: false" in wheel_meta

    python, site = _fresh_venv(tmp_path)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
          "--no-index", wheel], env=_env())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = json.loads(_run([python, "-c", textwrap.dedent(CHECK)], cwd=elsewhere,
                          env=_env(LOOM_CACHE_DIR=str(tmp_path / "jit"))).splitlines()[-1])
    assert Path(out["file"]).parent == site / "torch_loom"
    assert Path(out["C"]) == site / "torch_loom" / EXT
    assert Path(out["include"]) == site / "torch_loom" / "include"
    assert out["eps"] == [["torch_loom", "torch_loom:_autoload", str(site)]]
    assert not any(p and Path(p).resolve() == REPO / "python" for p in out["path"])
