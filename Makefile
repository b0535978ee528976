# One entry point for every task. `make test` and `make demo` each set up
# everything they need on a fresh machine: the .venv, torch, the build.
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.loom-setup
BUILD  := build
TORCH_VERSION := 2.13.0
# The client libraries whose models the test suite trains (tests/clients/),
# pinned with the torchvision that goes with this torch so that pip keeps it.
CLIENT_PKGS := torchvision==0.28.0 transformers==5.25.0 timm==1.0.31
export LOOM_REPO_ROOT := $(CURDIR)

.PHONY: all setup build test test-c test-sanitize test-tsan test-py test-guarded test-generic test-fuse-verify demo demo-mlp conformance conformance-fast conformance-update test-memory-format bench bench-quick clean

all: build

$(VPY):
	$(PYTHON) -m venv $(VENV)

# pip never builds in an isolated environment here: that would fetch another torch.
$(STAMP): pyproject.toml Makefile | $(VPY)
	$(VPY) -m pip install -q --upgrade "setuptools>=70" wheel
	$(VPY) -m pip install -q torch==$(TORCH_VERSION) numpy pytest ninja cmake matplotlib expecttest hypothesis
	$(VPY) -m pip install -q torch==$(TORCH_VERSION) $(CLIENT_PKGS)
	$(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

setup: $(STAMP)

$(BUILD)/build.ninja: CMakeLists.txt | $(STAMP)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(CURDIR)/$(VPY) \
	  -DCMAKE_PREFIX_PATH="$$($(VPY) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"

build: $(BUILD)/build.ninja
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(BUILD)

test-c: build
	cd $(BUILD) && ctest --output-on-failure

# The C runtime and kernels under AddressSanitizer + UndefinedBehaviorSanitizer.
test-sanitize: | $(STAMP)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(BUILD)-asan -G Ninja \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=ON -DLOOM_BUILD_PYTHON=OFF >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(BUILD)-asan
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure

# The C runtime tests, the JIT's and loomccl's under ThreadSanitizer (the
# kernels' tests gain nothing from it and take minutes): a data race
# reported there fails the target.
TSAN_TESTS := $(basename $(notdir $(wildcard tests/c/test_runtime_*.c))) test_jit test_ccl
test-tsan: | $(STAMP)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(BUILD)-tsan -G Ninja \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE_THREAD=ON -DLOOM_BUILD_PYTHON=OFF >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(BUILD)-tsan --target $(TSAN_TESTS)
	cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -R '^(test_runtime_|test_jit$$|test_ccl$$)'

test-py: build
	$(VPY) -m pytest -q --durations=25 tests

# The op and training tests on device memory the host cannot touch: any
# read of it above the HAL crashes here instead of working by accident.
test-guarded: build
	LOOM_DRIVER=guarded $(VPY) -m pytest -q tests/test_ops_*.py tests/test_training_nn.py tests/test_amp.py \
	  tests/test_device.py tests/test_fallback.py tests/test_serialization.py tests/test_guarded_driver.py \
	  tests/test_memory_snapshot.py tests/test_compile_loom.py tests/test_fusion.py \
	  tests/test_graphs.py tests/test_sparse.py

# The op and training tests with the CPU features capped to none, so every
# kernel family runs its generic C path (the AVX-512 convolutions their
# generic twins) and the ISA paths are held to it on one machine; and with
# LOOM_FUSE=verify, so every fused group of launches also runs unfused and
# any difference in its bytes fails the op (loom/fuse.h).
test-generic: build
	LOOM_CPU_FEATURES=generic LOOM_FUSE=verify $(VPY) -m pytest -q tests/test_ops_*.py tests/test_training_nn.py

# The same op and training tests with the ISA paths, under LOOM_FUSE=verify.
test-fuse-verify: build
	LOOM_FUSE=verify $(VPY) -m pytest -q tests/test_ops_*.py tests/test_training_nn.py tests/test_fusion.py

test: test-c test-sanitize test-tsan test-py test-guarded test-generic

# A character-level GPT trained on loom with the CPU fallback forbidden:
# an op without a native kernel stops it (examples/train_gpt.py --help).
demo: build
	LOOM_FALLBACK=error $(VPY) examples/train_gpt.py

demo-mlp: build
	$(VPY) examples/train_mlp.py

# Every OpInfo of op_db on loom against the CPU: conformance/REPORT.md, results.json.
conformance: build
	$(VPY) -m tests.conformance.run --full

# The ratchet that `make test` runs: common ops plus the cheap expected native passes.
conformance-fast: build
	$(VPY) -m tests.conformance.run --fast --check

# The full sweep, then rewrite conformance/expected_native.txt from it.
conformance-update: build
	$(VPY) -m tests.conformance.run --full --update-expected

# Every channels-last OpInfo sample, forward and backward, laid out on loom
# as on the CPU (`make test` runs the first sample of each op).
test-memory-format: build
	LOOM_MEMFMT_FULL=1 $(VPY) -m pytest -q tests/test_memory_format.py

bench: build
	$(VPY) -m bench.run

bench-quick: build
	$(VPY) -m bench.run --quick

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan python/torch_loom/_C*.so
