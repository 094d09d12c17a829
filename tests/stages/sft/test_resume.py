"""The SFT stage killed by SIGKILL resumes from its last checkpoint and ends bit-exact with an
uninterrupted run; the killed run commits nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.store.store import ArtifactStore
from tests.helpers import commit_checkpoint, commit_table
from tests.stages.sft.test_stage import _arith_samples

# The real stage through its public entry point; the fault is injected by wrapping the trainer
# the stage calls, so that the process dies right after step KILL_AT (state saved at its checkpoints).
RUN = textwrap.dedent('''
    import functools, json, os, signal, sys, torch
    torch.set_num_threads(1)
    from compass.store.store import ArtifactStore
    from stages.sft import stage
    from stages.sft.config import SFTConfig
    from compass.logs import setup_logging
    setup_logging()
    store_dir, kill_at, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    store = ArtifactStore(store_dir)
    inputs = {"base": store.get("checkpoint", "base_ckpt", "v1"), "data": store.get("sft_samples", "sft_longcot", "v1")}
    def on_step(done):
        if done == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    stage.train_sft = functools.partial(stage.train_sft, on_step=on_step)
    cfg = SFTConfig(steps=7, batch_size=4, grad_accum_steps=2, checkpoint_every=2, eval_every=3, log_every=1,
                    backend=backend)
    res = stage.run(cfg, inputs, store, output_names={"checkpoint": "thinking_ckpt"})
    print(json.dumps({"status": res.status, "uri": res.outputs["checkpoint"]}))
''')

SAME = ("loss_first", "loss_last", "heldout_curve", "tokens", "supervised_tokens", "padded_tokens", "steps",
        "train_samples", "heldout_samples")


def _store(path) -> ArtifactStore:
    store = ArtifactStore(str(path))
    tok = build_tokenizer("")
    commit_checkpoint(store, "base_ckpt", build_model(ModelConfig(), tok, seed=0), tok)
    commit_table(store, "sft_samples", "sft_longcot", _arith_samples(40))
    return store


@pytest.mark.parametrize("backend", ["torch", "megatron"])
def test_sft_resumes_after_sigkill_and_equals_an_uninterrupted_run(tmp_path, backend):
    from safetensors.torch import load_file
    script = tmp_path / "run.py"
    script.write_text(RUN)

    def run(store, state, kill_at):
        env = {**os.environ, "COMPASS_PROGRESS": "0", "PYTHONPATH": os.getcwd(), "COMPASS_STATE_DIR": str(state)}
        return subprocess.run([sys.executable, str(script), store.root, str(kill_at), backend], env=env,
                              capture_output=True, text=True, timeout=300)

    whole_store, killed_store = _store(tmp_path / "whole"), _store(tmp_path / "killed")
    whole = run(whole_store, tmp_path / "state-whole", -1)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = run(killed_store, tmp_path / "state", 5)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert killed_store.list("checkpoint", "thinking_ckpt") == []                 # nothing committed
    assert list((tmp_path / "state").rglob("sft_state.pt"))                       # the state of step 4 is there
    resumed = run(killed_store, tmp_path / "state", -1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 4 of 7" in resumed.stderr
    assert not list((tmp_path / "state").rglob("sft_state.pt"))                   # cleared once committed

    a = whole_store.open(json.loads(whole.stdout.strip().splitlines()[-1])["uri"])
    b = killed_store.open(json.loads(resumed.stdout.strip().splitlines()[-1])["uri"])
    assert a.version == b.version
    assert a.manifest.extra["resumed_from_step"] is None and b.manifest.extra["resumed_from_step"] == 4
    assert a.manifest.extra["backend"] == b.manifest.extra["backend"] == backend
    for k in SAME:
        assert a.manifest.extra[k] == b.manifest.extra[k], k
    assert [h["step"] for h in b.manifest.extra["heldout_curve"]] == [0, 3, 6, 7]
    assert "| resumed from step | 4 |" in (b.local_dir() / "summary.md").read_text()
    wa, wb = load_file(a.local_dir() / "model.safetensors"), load_file(b.local_dir() / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k                                       # bit-exact on CPU, one thread
