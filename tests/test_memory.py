"""The loom caching allocator as PyTorch sees it: exact statistics, cache,
out-of-memory errors."""

import pytest
import torch

MiB = 1 << 20


def test_memory_allocated_exact_deltas(loom):
    loom.synchronize()
    base = loom.memory_allocated()
    a = torch.empty(MiB, dtype=torch.uint8, device="loom")
    assert loom.memory_allocated() == base + MiB
    b = torch.empty(256, dtype=torch.float32, device="loom")  # 1 KiB: small pool
    assert loom.memory_allocated() == base + MiB + 1024
    stats = loom.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + MiB + 1024
    assert stats["allocation.all.current"] >= 2
    del a
    assert loom.memory_allocated() == base + 1024
    del b
    assert loom.memory_allocated() == base


def test_peak_and_reset(loom):
    base = loom.memory_allocated()
    loom.reset_peak_memory_stats()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="loom")
    del x
    assert loom.max_memory_allocated() >= base + 4 * MiB
    loom.reset_peak_memory_stats()
    assert loom.max_memory_allocated() == loom.memory_allocated()
    loom.reset_accumulated_memory_stats()
    assert loom.memory_stats()["allocation.all.allocated"] == 0


def test_empty_cache_releases_reserved(loom):
    x = torch.empty(16 * MiB, dtype=torch.uint8, device="loom")
    del x
    loom.synchronize()
    reserved_before = loom.memory_reserved()
    loom.empty_cache()
    assert loom.memory_reserved() <= reserved_before
    assert loom.memory_reserved() >= loom.memory_allocated()


def test_stats_keys_match_cuda(loom):
    stats = loom.memory_stats()
    for key in ["allocated_bytes.all.current", "allocated_bytes.all.peak",
                "allocated_bytes.small_pool.allocated", "allocated_bytes.large_pool.freed",
                "reserved_bytes.all.current", "active_bytes.all.current",
                "inactive_split_bytes.all.current", "requested_bytes.all.current",
                "segment.all.current", "active.all.current", "num_alloc_retries",
                "num_ooms", "num_device_alloc", "num_device_free"]:
        assert key in stats, key
    summary = loom.memory_summary()
    assert "Allocated memory" in summary


def test_get_memory_info_respects_limit(loom):
    free, total = loom.get_memory_info()
    assert total == loom.get_device_properties().total_memory
    assert 0 <= free <= total


def test_out_of_memory_raises_and_device_recovers(py):
    out = py(
        """
        import torch, re
        x = torch.empty(16 << 20, dtype=torch.uint8, device="loom")
        try:
            torch.empty(256 << 20, dtype=torch.uint8, device="loom")
        except torch.OutOfMemoryError as e:
            msg = str(e)
            print("OOM:", msg)
            assert str(256 << 20) in msg or "256" in msg, msg
            assert "free" in msg.lower() or "available" in msg.lower(), msg
        else:
            raise SystemExit("no OutOfMemoryError")
        assert torch.loom.memory_stats()["num_ooms"] >= 1
        y = torch.ones(1 << 20, device="loom")
        assert y.sum().item() == float(1 << 20)
        print("recovered")
        """,
        env={"LOOM_MEMORY_LIMIT": "64M"},
    ).stdout
    assert "recovered" in out


def test_oom_is_a_runtime_error_subclass(py):
    py(
        """
        import torch
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="loom")
        except RuntimeError as e:
            assert isinstance(e, torch.OutOfMemoryError), type(e)
        """,
        env={"LOOM_MEMORY_LIMIT": "32M"},
    )
