"""RankGroup's error reporting when a rank dies (real Ray actors on loopback, joined by gloo): the death is
reported, not the echo of it in the surviving rank's collective, whichever reaches the controller first."""
from __future__ import annotations

import os
import sys
import time

import pytest


pytestmark = [pytest.mark.ray, pytest.mark.slow]


class Planted:
    """A rank whose calls fail on purpose."""

    def __init__(self):
        import torch.distributed as dist
        self.rank = dist.get_rank()

    def peer_dies_late(self):
        """Rank 0 dies after a second; rank 1 at once raises what gloo raises when its peer's socket closes:
        the survivor's error reaches the controller first."""
        if self.rank == 0:
            time.sleep(1.0)
            os._exit(1)
        raise RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer")

    def plain_error(self):
        if self.rank == 1:
            raise ValueError("a bug in rank 1")
        time.sleep(600)             # rank 0 would wait for rank 1 in a collective


@pytest.fixture
def group(ray_up):
    import ray
    from compass.dist.rank_group import RankGroup
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])     # the ranks cannot import tests/
    g = RankGroup(Planted, (), world_size=2, bundle={"CPU": 0.5}, backend="gloo", what="planted ranks")
    yield g
    g.close()


def test_the_death_is_reported_not_the_survivors_echo_of_it(group):
    from compass.dist.rank_group import RankDied
    with pytest.raises(RankDied) as e:
        group.call("peer_dies_late")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("planted ranks: rank 0 of 2 died during peer_dies_late"), msg


def test_any_other_error_is_raised_at_once(group):
    t0 = time.monotonic()
    with pytest.raises(Exception, match="a bug in rank 1"):
        group.call("plain_error")
    assert time.monotonic() - t0 < 20          # not held for the peer-death wait (30 s), nor for rank 0's sleep
