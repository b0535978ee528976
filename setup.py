"""Builds the native extension torch_loom._C through CMake, against the
installed torch. The metadata lives in pyproject.toml.

    pip install --no-build-isolation .      # or: pip wheel --no-build-isolation .

Wheels and non-editable installs configure a CMake build directory of their
own (under setuptools' build_temp) and build only the _C target in it. Set
LOOM_BUILD_DIR to an existing CMake build directory (the repository's
build/, made by `make build`) to reuse it: the build is then incremental.

Editable installs (`pip install -e .`, which `make setup` runs) build
nothing: the package is imported from python/, where `make build` writes
the extension.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _cache_entry(cache, name):
    for line in cache.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.split(":")[0] == name:
            return value
    return None


def _tool(name):
    """A tool installed beside this interpreter (the pip packages cmake and
    ninja in a venv) or else on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        if getattr(self, "editable_mode", False):
            return
        super().run()

    def build_extension(self, ext):
        import torch.utils

        cmake = _tool("cmake")
        if cmake is None:
            raise RuntimeError("torch_loom: building needs cmake (pip install cmake ninja)")
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        torch_dir = Path(torch.utils.cmake_prefix_path) / "Torch"

        given = os.environ.get("LOOM_BUILD_DIR")
        build_dir = Path(given).resolve() if given else Path(self.build_temp).resolve() / "cmake"
        cache = build_dir / "CMakeCache.txt"
        if cache.is_file():
            configured = _cache_entry(cache, "Torch_DIR")
            if configured and Path(configured).resolve() != torch_dir.resolve():
                raise RuntimeError(
                    f"torch_loom: {build_dir} was configured against the torch in {configured}, "
                    f"not the installed one in {torch_dir}; build elsewhere or unset LOOM_BUILD_DIR")
        else:
            args = [cmake, "-S", str(ROOT), "-B", str(build_dir),
                    "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython_EXECUTABLE={sys.executable}",
                    f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"]
            if _tool("ninja"):
                args += ["-G", "Ninja"]
            if not given:
                args.append(f"-DLOOM_PYTHON_OUTPUT_DIR={build_dir / 'python'}")
            subprocess.run(args, check=True, env=env)
        subprocess.run([cmake, "--build", str(build_dir), "--target", "_C",
                        "--parallel", str(os.cpu_count() or 1)], check=True, env=env)

        out_dir = _cache_entry(cache, "LOOM_PYTHON_OUTPUT_DIR") or str(ROOT / "python" / "torch_loom")
        built = Path(out_dir) / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.is_file():
            raise RuntimeError(f"torch_loom: the build did not produce {built} "
                               f"(is {build_dir} configured for another Python?)")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        if not self.inplace:
            # The C contract ships with the package: kernels compiled at run
            # time (torch_loom.compiler.jit) include loom/kernel_abi.h.
            headers = target.parent / "include"
            shutil.rmtree(headers, ignore_errors=True)
            shutil.copytree(ROOT / "include", headers)


# setuptools' own files go beside CMake's, not into python/: an egg-info
# there would be a second torch_loom distribution for the editable install.
SCRATCH = "build/setuptools"
os.makedirs(SCRATCH, exist_ok=True)
setup(ext_modules=[CMakeExtension("torch_loom._C")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}})
