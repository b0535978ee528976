"""Operator conformance: every OpInfo of PyTorch's op_db, run on a device and on the CPU.

catalog  - which (op, dtype) pairs exist and what the OpInfo says about them
compare  - one (op, dtype): copy the CPU samples to the device, run, compare, classify
worker   - a subprocess that runs a list of items and streams results as JSON lines
runner   - splits the work into chunks over worker processes; survives crashes and hangs
report   - results.json, REPORT.md and the native-pass expectation file
run      - the command line (`python -m tests.conformance.run`)
"""
