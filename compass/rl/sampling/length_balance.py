"""Partition a step's rollout work over workers by predicted length (paper §3.1.1), and measure the result.

A synchronous rollout ends when its slowest worker does; a worker that got the long-tail prompts keeps
the others idle at the ``ray.get`` barrier. The paper predicts each prompt's generation length before
rollout and hands every worker about the same total expected decoding length. Here:

- a **partitioner** ``fn(work, workers) -> shards``: ``work`` ``[P]`` non-negative floats (a prompt's
  predicted cost: ``n`` samples x predicted tokens), ``shards`` ``workers`` lists of prompt indices, every
  index exactly once. Registered by name in :data:`PARTITIONERS`: ``round_robin`` (the baseline: prompt
  ``i`` to worker ``i mod W``), ``lpt`` (longest processing time first) and ``karmarkar_kk`` (the
  largest-differencing method, multi-way). All deterministic;
- :func:`longest_first`: within a worker, the longest predicted prompts start first, so an engine that
  admits sequences as slots free (vLLM) does not start a long one last;
- :func:`schedule_metrics`: makespan and each worker's idle share of it, from measured busy seconds;
- :func:`split_quality`: the same in token units against the perfect split of the true lengths.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from compass.registry import Registry

PARTITIONERS = Registry("rollout partitioner")


def get_partitioner(name: str):
    return PARTITIONERS.lookup(name)


def _check(work: Sequence[float], workers: int) -> None:
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    bad = next((i for i, w in enumerate(work) if not w >= 0), None)      # catches NaN too
    if bad is not None:
        raise ValueError(f"work[{bad}] must be a non-negative number, got {work[bad]!r}")


@PARTITIONERS.register("round_robin")
def round_robin(work: Sequence[float], workers: int) -> list[list[int]]:
    """Prompt ``i`` to worker ``i mod workers``: what a scheduler that knows no lengths does."""
    _check(work, workers)
    return [list(range(k, len(work), workers)) for k in range(workers)]


@PARTITIONERS.register("lpt")
def lpt(work: Sequence[float], workers: int) -> list[list[int]]:
    """Longest processing time first: heaviest prompt (ties: lower index) to the least-loaded worker (ties:
    lower worker). Makespan <= (4/3 - 1/(3W)) x optimal (Graham 1969)."""
    _check(work, workers)
    shards: list[list[int]] = [[] for _ in range(workers)]
    loads = [(0.0, k) for k in range(workers)]
    for i in sorted(range(len(work)), key=lambda i: (-work[i], i)):
        load, k = heapq.heappop(loads)
        shards[k].append(i)
        heapq.heappush(loads, (load + work[i], k))
    return [sorted(s) for s in shards]


@PARTITIONERS.register("karmarkar_karp")
def karmarkar_karp(work: Sequence[float], workers: int) -> list[list[int]]:
    """The largest differencing method for ``workers``-way partitioning (Karmarkar & Karp 1982; the multi-way
    form of Michiels et al. 2003): every prompt starts as a ``workers``-tuple of subsets (itself plus empty
    ones); repeatedly the two tuples with the largest spread (max - min load) are merged, heaviest subset of
    one with the lightest of the other, until one tuple is left. Usually closer to the optimum than LPT when
    a few prompts dominate."""
    _check(work, workers)
    if not work:
        return [[] for _ in range(workers)]
    heap = []           # (-spread, tie, loads desc, subsets)
    for i, w in enumerate(work):
        loads = [float(w)] + [0.0] * (workers - 1)
        heap.append((-float(w), i, loads, [[i]] + [[] for _ in range(workers - 1)]))
    heapq.heapify(heap)
    tie = len(work)
    while len(heap) > 1:
        _, _, la, sa = heapq.heappop(heap)
        _, _, lb, sb = heapq.heappop(heap)
        # heaviest of a with lightest of b: both are kept sorted by load, descending
        merged = sorted(((la[k] + lb[workers - 1 - k], sa[k] + sb[workers - 1 - k]) for k in range(workers)),
                        key=lambda x: -x[0])
        loads, subsets = [m[0] for m in merged], [m[1] for m in merged]
        heapq.heappush(heap, (-(loads[0] - loads[-1]), tie, loads, subsets))
        tie += 1
    return [sorted(s) for s in heap[0][3]]


def longest_first(shard: Sequence[int], work: Sequence[float]) -> list[int]:
    """``shard``'s prompt indices, longest predicted first (ties: lower index first)."""
    return sorted(shard, key=lambda i: (-work[i], i))


def schedule_metrics(busy_s: Sequence[float]) -> dict:
    """Measured busy seconds per worker -> ``makespan_s`` (the slowest), ``idle_share`` (mean over workers of
    ``1 - busy / makespan``: the share of the workers' time spent waiting at the barrier) and
    ``idle_share_per_worker``."""
    if not busy_s:
        return {"makespan_s": 0.0, "idle_share": 0.0, "idle_share_per_worker": []}
    span = max(busy_s)
    idle = [(1.0 - b / span) if span > 0 else 0.0 for b in busy_s]
    return {"makespan_s": span, "idle_share": sum(idle) / len(idle), "idle_share_per_worker": idle}


def split_quality(shards: Sequence[Sequence[int]], true_work: Sequence[float]) -> dict:
    """Token-unit quality of ``shards`` against the true work: ``makespan_tokens`` (the heaviest shard's true
    work), ``ideal_tokens`` (the perfect split: ``max(total / W, largest item)``, a lower bound of any
    partition's makespan) and ``makespan_over_ideal``."""
    loads = [sum(true_work[i] for i in s) for s in shards]
    ideal = max(sum(true_work) / max(len(shards), 1), max(true_work, default=0.0))
    span = max(loads, default=0.0)
    return {"makespan_tokens": span, "ideal_tokens": ideal,
            "makespan_over_ideal": span / ideal if ideal > 0 else 1.0}
