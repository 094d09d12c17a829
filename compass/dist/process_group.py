"""Joining a ``torch.distributed`` group: NCCL where the rank computes on a GPU, gloo on the CPU.

The default group of a process is made once; a process that already has one keeps it (an in-process
trainer of one rank beside a Megatron test's group of one, say), provided its size is the one asked for.
"""
from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600.0


def default_backend(device: torch.device | str | None = None) -> str:
    """``nccl`` for a CUDA device (or, with none given, where torch sees a GPU), else ``gloo``."""
    if device is None:
        return "nccl" if torch.cuda.is_available() else "gloo"
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (rank 0 listens on it; another process could still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def join(backend: str, rank: int, world_size: int, address: str | None = None,
         timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Make this process rank ``rank`` of a default group of ``world_size``.

    ``address``: ``host:port`` where rank 0 listens (TCP rendezvous); None with ``world_size`` 1: an in-memory
    store, no port. A process already in a group of that size keeps it; one of another size is an error."""
    if dist.is_initialized():
        if dist.get_world_size() != world_size:
            raise RuntimeError(f"this process is already in a torch.distributed group of {dist.get_world_size()} "
                               f"rank(s), not {world_size}")
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    if address is None:
        if world_size != 1:
            raise ValueError("join: a group of more than one rank needs rank 0's address")
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        return
    dist.init_process_group(backend, init_method=f"tcp://{address}", rank=rank, world_size=world_size,
                            timeout=timeout)
