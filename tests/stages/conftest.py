"""The tiny world, built once per test session at small sizes.

``world_store``: a local ArtifactStore (in a session tmp dir) where the world
stage has run once. ``world_arts``: its outputs, slot -> Artifact
(``raw_sft``, ``raw_prompts``, ``preferences``, ``eval_prompts``, ``base``).
``world_config``: the config it ran with. Tests should write their own
outputs to their own store (``tmp_path``) or use names that do not collide.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("COMPASS_PROGRESS", "0")

SMALL_WORLD = dict(suites={"arithmetic": {"n": 120, "n_eval": 10}, "ecommerce_category": {"n": 60, "n_eval": 10}},
                   n_preference_pairs=30, n_planted=2)


def small_world_config(**over):
    from stages.world.config import WorldConfig
    return WorldConfig(**{**SMALL_WORLD, **over})


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (float sums then match bit for bit across runs), restored after."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def world_config():
    return small_world_config()


@pytest.fixture(scope="session")
def _world_run(tmp_path_factory, world_config):
    from compass.store.store import ArtifactStore
    from stages.world import stage as world
    store = ArtifactStore(str(tmp_path_factory.mktemp("world") / "store"))
    return store, world.run(world_config, {}, store)


@pytest.fixture(scope="session")
def world_store(_world_run):
    return _world_run[0]


@pytest.fixture(scope="session")
def world_result(_world_run):
    """The world stage's StageResult (status, version, output URIs)."""
    return _world_run[1]


@pytest.fixture(scope="session")
def world_arts(_world_run) -> dict:
    store, result = _world_run
    return {slot: store.open(uri) for slot, uri in result.outputs.items()}
