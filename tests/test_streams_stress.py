"""Concurrency stress from Python: several threads, each with its own
streams (of mixed priority), producing on one stream and consuming on
another behind an event, freeing tensors another stream still reads
(record_stream), churning allocations, waiting on each other's events and
synchronizing, all at once. Every result is compared with the same
computation on the CPU.

The consumer stream is given a long fill before it reads the producer's
tensor, so that the tensor is usually freed, and its size allocated again
on the producer, while the consumer has not read it yet: a wait released
early or a block reused too soon shows as a wrong value."""

import random
import threading

import torch

THREADS = 4
ROUNDS = 40
SCRATCH = 4 * 1024 * 1024  # elements of the consumer's long fill


def _worker(index, shared_events, barrier, errors):
    try:
        loom = torch.loom
        rng = random.Random(1234 + index)
        producer = loom.Stream(priority=-1 if index % 2 else 0)
        consumer = loom.Stream(priority=0 if index % 2 else -1)
        side = loom.Stream()
        scratch = torch.empty(SCRATCH, device="loom")
        event = loom.Event()
        barrier.wait()
        for r in range(ROUNDS):
            n = rng.randint(1, 200_000)
            scale = float(index * 100 + r)
            with loom.stream(producer):
                x = torch.arange(n, device="loom", dtype=torch.float32) * scale + index
                event.record(producer)
                # This thread's shared event, waited on by the others.
                shared_events[index].record(producer)
            consumer.wait_event(event)
            if rng.random() < 0.5:
                # Re-recorded elsewhere: the consumer still waits for x.
                event.record(side)
            with loom.stream(consumer):
                scratch.fill_(float(r))  # keeps the consumer busy
                y = x * 2 + 1
                x.record_stream(consumer)
            del x
            with loom.stream(producer):
                # Same size, same stream: without record_stream, x's block.
                clobber = torch.full((n,), -7.0, device="loom")
            other = shared_events[rng.randrange(len(shared_events))]
            side.wait_event(other)
            churn = []
            for _ in range(rng.randint(0, 4)):
                stream = rng.choice([producer, consumer, side])
                size = rng.choice([rng.randint(1, 4096), rng.randint(1, 1 << 20)])
                with loom.stream(stream):
                    t = torch.empty(size, device="loom").fill_(1.0)
                if rng.random() < 0.5:
                    t.record_stream(rng.choice([producer, consumer, side]))
                churn.append(t)
            del churn
            choice = rng.randrange(6)
            if choice == 0:
                consumer.synchronize()
            elif choice == 1:
                event.synchronize()
            elif choice == 2:
                loom.synchronize()
            elif choice == 3:
                assert other.query() in (True, False)
            with loom.stream(consumer):
                got = y.cpu()
            want = (torch.arange(n, dtype=torch.float32) * scale + index) * 2 + 1
            if not torch.equal(got, want):
                bad = (got != want).nonzero()[0].item()
                raise AssertionError(
                    f"thread {index} round {r}: y[{bad}] = {got[bad].item()}, "
                    f"expected {want[bad].item()}")
            del clobber, y
        producer.synchronize()
        consumer.synchronize()
        side.synchronize()
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)


def test_threads_streams_events_record_stream(loom):
    shared_events = [loom.Event() for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    errors = []
    threads = [threading.Thread(target=_worker, args=(i, shared_events, barrier, errors))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a stress thread hung"
    assert not errors, errors[0]
    loom.synchronize()
    for e in shared_events:
        e.synchronize()
        assert e.query()
