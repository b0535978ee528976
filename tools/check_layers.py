#!/usr/bin/env python3
"""The layering check: which folder may use which.

Every C/C++ file includes headers by their path from the repository root
(or include/), so the compiler would accept an include across any edge.
This script holds the edges the architecture allows (the folders' README.md
files describe them) and fails on any other:

  check_layers.py [--strict]
      Each quoted #include of every file under base/, kernels/, include/,
      runtime/, csrc/ and bench/c/ must resolve to a file its folder may
      include. A file in a folder without a rule fails too: a new folder
      states its dependencies here first. --strict also fails on allowlist
      entries that are no longer needed (so the list only shrinks).

  check_layers.py --nm NM --lib NAME=ARCHIVE_OR_OBJECT ...
      The same for symbols: every symbol a library leaves undefined and
      another loom library defines must come from a library it may link
      against (LINKS below), so an edge the includes hide (a declaration
      copied by hand) fails too.

Exit status 1 and one line per violation on failure.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The public contract's top-level headers: status, features, kernel_abi,
# hal, driver (not the kernel families' plan contracts in loom/kernels/).
PUBLIC = "include/loom/*.h"

# For each folder (the longest matching prefix wins), what its files may
# include besides themselves: a folder ("x/", recursively), a file, or a
# pattern with * (not crossing "/"). None: anything (white-box tests).
RULES = {
    # The contract includes only itself.
    "include/loom/": ["include/loom/"],
    # base/ depends on nothing: the status type and the feature bits only.
    "base/": ["base/", "include/loom/status.h", "include/loom/features.h"],
    # Kernels see base/ and the kernel side of the contract, never the
    # runtime's API: they run beneath it.
    "kernels/": ["kernels/", "base/", "include/loom/status.h", "include/loom/features.h",
                 "include/loom/kernel_abi.h", "include/loom/kernels/"],
    # The allocator uses the HAL only through its public calls.
    "runtime/alloc/": ["runtime/alloc/", "base/", PUBLIC],
    # The HAL front end: its own files, the allocator's headers for the
    # runtime (not its internals), never a driver.
    "runtime/hal/": ["runtime/hal/", "base/", PUBLIC,
                     "runtime/alloc/caching_allocator.h", "runtime/alloc/host_allocator.h"],
    # Drivers reach the front end only through loom/driver.h; the host
    # driver's kernel table is the kernel library. Adaptive eager reads
    # pointwise launches' op words to run them as a GEMM's epilogue steps
    # (two argument contracts, enums only).
    "runtime/drivers/host/": ["runtime/drivers/host/", "base/", PUBLIC, "kernels/registry.h",
                              "include/loom/kernels/pointwise.h",
                              "include/loom/kernels/gemm_epilogue.h"],
    # The guarded driver wraps the host driver through loom_host_driver().
    "runtime/drivers/guarded/": ["runtime/drivers/guarded/", "base/", PUBLIC],
    # The JIT registers the kernels it compiles through the runtime's public
    # API (loom/hal.h), like any user of the runtime; it names no driver.
    "runtime/jit/": ["runtime/jit/", "base/", PUBLIC],
    # loomccl is a user of the runtime like the JIT: loom/hal.h and its own
    # contract, loom/ccl.h (which names the reduction kernel's contract).
    "runtime/ccl/": ["runtime/ccl/", "base/", PUBLIC],
    # drivers/builtin.c: the list of built-in drivers the HAL asks for.
    "runtime/drivers/": ["runtime/hal/builtin_drivers.h", PUBLIC,
                         "runtime/drivers/guarded/guarded_driver.h"],
    # The binding sees the C contract and its own headers only.
    "csrc/": ["csrc/", "include/loom/"],
    "bench/c/": ["include/loom/", "base/", "kernels/"],
    "tests/c/": None,
}

# Includes across a forbidden edge tolerated while their files are being
# converted, as {file: [included path]}; --strict (ctest) fails on an entry
# no longer used, so the list only shrinks. Empty since the convolution
# adapters launch by name: no csrc/ file includes kernels/.
PENDING = {}

SCANNED = ["base", "kernels", "include", "runtime", "csrc", "bench/c", "tests/c"]
SOURCE_EXT = (".c", ".h", ".cpp", ".hpp", ".cc", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# Libraries (CMake targets) and what each may take symbols from. `loom`
# (drivers/builtin.c) composes them; the runtime takes from it only the
# driver list it declares.
LINKS = {
    "loom_base": {},
    "loom_kernels": {"loom_base": None},
    "loom_runtime": {"loom_base": None, "loom": {"loom_builtin_drivers"}},
    "loom_driver_host": {"loom_runtime": None, "loom_kernels": None, "loom_base": None},
    "loom_driver_guarded": {"loom_driver_host": None, "loom_runtime": None, "loom_base": None},
    "loom_jit": {"loom_runtime": None, "loom_base": None},
    "loom_ccl": {"loom_runtime": None, "loom_base": None},
    "loom": {"loom_ccl": None, "loom_jit": None, "loom_driver_guarded": None, "loom_driver_host": None,
             "loom_runtime": None, "loom_kernels": None, "loom_base": None},
}


def matches(path, pattern):
    if pattern.endswith("/"):
        return path.startswith(pattern)
    if "*" in pattern:
        return re.fullmatch(re.escape(pattern).replace(r"\*", "[^/]*"), path) is not None
    return path == pattern


def rule_for(path):
    best = None
    for prefix in RULES:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def resolve(path, target):
    """The repository path a quoted include of `target` from `path` reaches,
    searched as the compiler does: the file's folder, then csrc/ (the
    binding's include path), include/ and the root."""
    bases = [os.path.dirname(path)]
    if path.startswith("csrc/"):
        bases.append("csrc")
    bases += ["include", ""]
    for base in bases:
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(ROOT, candidate)):
            return candidate
    return None


def source_files():
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def check_includes(strict):
    errors, used_pending = [], set()
    for path in source_files():
        rule = rule_for(path)
        if rule is None:
            errors.append(f"{path}: no layer rule for this folder (tools/check_layers.py RULES)")
            continue
        allowed = RULES[rule]
        if allowed is None:
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(path, m.group(1))
                if target is None:
                    errors.append(f"{path}:{number}: \"{m.group(1)}\" resolves to no file")
                    continue
                if any(matches(target, p) for p in allowed):
                    continue
                if target in PENDING.get(path, ()):
                    used_pending.add((path, target))
                    continue
                errors.append(f"{path}:{number}: includes {target}, but {rule} may include only "
                              f"{', '.join(allowed)}")
    stale = [(p, t) for p, ts in PENDING.items() for t in ts if (p, t) not in used_pending]
    for p, t in stale:
        message = f"tools/check_layers.py: PENDING allows {p} -> {t}, no longer used: delete it"
        if strict:
            errors.append(message)
        else:
            print("note: " + message, file=sys.stderr)
    return errors


def symbols(nm, path):
    """(defined, undefined) global symbols of an archive or object file."""
    out = subprocess.run([nm, "-g", "-P", path], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2 or line.endswith(":"):
            continue  # an archive member's header
        (undefined if fields[1] in "Uw" else defined).add(fields[0])
    return defined, undefined


def check_links(nm, libs):
    errors = []
    tables = {name: symbols(nm, path) for name, path in libs.items()}
    for name, (defined, undefined) in tables.items():
        if name not in LINKS:
            errors.append(f"{name}: no link rule (tools/check_layers.py LINKS)")
            continue
        for symbol in sorted(undefined - defined):
            providers = [other for other, (d, _) in tables.items() if other != name and symbol in d]
            for provider in providers:
                allowed = LINKS[name].get(provider, ())
                if allowed is None or symbol in allowed:
                    continue
                errors.append(f"{name} uses {symbol} from {provider}, which it may not depend on")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--nm")
    parser.add_argument("--lib", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    if args.lib:
        libs = dict(item.split("=", 1) for item in args.lib)
        errors = check_links(args.nm or "nm", libs)
    else:
        errors = check_includes(args.strict)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"layering check: {len(errors)} violation(s); the folders' README.md files say "
              "what each may depend on", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
