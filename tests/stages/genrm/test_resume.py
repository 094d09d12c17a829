"""The GenRM stage killed by SIGKILL during GRPO commits nothing; a re-run resumes and ends bit-identical."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import torch

RUN = r'''
import json, logging, sys
logging.basicConfig(level=logging.INFO)
import torch
torch.set_num_threads(1)
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer, save_checkpoint
from compass.store.store import ArtifactStore
from stages.genrm import stage as genrm
from tests.helpers import commit_artifact
from tests.stages.genrm.test_stage import BAD_LABELS, _corpus, _pairs, tiny_config

store = ArtifactStore(sys.argv[1])
table = _pairs(48, bad_labels=BAD_LABELS)
tok = build_tokenizer(_corpus(table))
inputs = {
    "base": commit_artifact(store, "checkpoint", "base_ckpt",
                            lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=0), tok, w.dir)),
    "pairs": commit_artifact(store, "preference_pairs", "preference_pairs", lambda w: w.write_table(table)),
}
res = genrm.run(tiny_config(grpo={"steps": 4, "checkpoint_every": 1,
                                  "sampling": {"prompts_per_step": 4, "group_size": 2},
                                  "rollout": {"max_new_tokens": 48}, "trainer": {"lr": 1e-4}}),
                inputs, store, output_names={"checkpoint": "genrm_ckpt"})
art = store.open(res.outputs["checkpoint"])
print(json.dumps({"status": res.status, "dir": str(art.local_dir()),
                  "curve": art.manifest.extra["grpo_reward_curve"]}))
'''


def test_resume_after_sigkill_during_grpo_equals_an_uninterrupted_run(tmp_path):
    from safetensors.torch import load_file
    from compass.store.store import ArtifactStore
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = {**os.environ, "COMPASS_PROGRESS": "0", "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}

    def run(name, kill_at=None):
        e = {**env, "COMPASS_STATE_DIR": str(tmp_path / f"state-{name}")}
        if kill_at is not None:
            e["COMPASS_GENRM_KILL_AT_STEP"] = str(kill_at)
        return subprocess.run([sys.executable, str(script), str(tmp_path / f"store-{name}")], env=e,
                              capture_output=True, text=True, timeout=600)

    whole = run("whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = run("resumed", kill_at=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    store = ArtifactStore(str(tmp_path / "store-resumed"))
    assert store.list(kind="checkpoint", name="genrm_ckpt") == []          # the killed run committed nothing
    assert store.list(kind="judgements") == [] and store.list(kind="quarantine") == []
    states = list((tmp_path / "state-resumed").rglob("*.pt"))
    assert {p.name for p in states} >= {"warm_start.pt", "rl_state.pt"}
    resumed = run("resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed at step 2" in resumed.stderr
    w, r = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (whole, resumed))
    assert r["status"] == "ran" and r["curve"] == w["curve"]
    a, b = (load_file(os.path.join(x["dir"], "model.safetensors")) for x in (w, r))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert not any((tmp_path / "state-resumed").rglob("*.pt"))            # state cleared after the commit
