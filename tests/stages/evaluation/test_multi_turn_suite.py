"""A BFCL multi-turn suite in the evaluation stage: each sample is a conversation held turn by turn
(tool results shown back, state carried across turns in the sandbox), then scored by bfcl_multi_turn.
Rows come through the shipped import config from files written here in BFCL's format."""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import pytest

from compass.ingest.config import load_import_config
from compass.ingest.importer import import_table
from compass.store.store import ArtifactStore
from stages.evaluation import stage as evaluation
from stages.evaluation.config import EvalConfig

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "import" / "bfcl_multi_turn.yaml"
COUNTER = '''
class Counter:
    def __init__(self):
        self.value = 0

    def _load_scenario(self, config, long_context=False):
        self.value = config.get("value", 0)

    def add(self, n: int) -> dict:
        """Add n to the counter."""
        self.value += n
        return {"value": self.value}

    def double(self) -> dict:
        """Double the counter."""
        self.value *= 2
        return {"value": self.value}
'''
QUESTIONS = [
    {"id": "multi_turn_base_0", "initial_config": {"Counter": {"value": 2}}, "involved_classes": ["Counter"],
     "question": [[{"role": "user", "content": "Add 3."}], [{"role": "user", "content": "Now double it."}]]},
    {"id": "multi_turn_base_1", "initial_config": {"Counter": {"value": 1}}, "involved_classes": ["Counter"],
     "question": [[{"role": "user", "content": "Double it."}], [{"role": "user", "content": "Add 10."}],
                  [{"role": "user", "content": "Delete the counter."}]]},
]
ANSWERS = [{"id": "multi_turn_base_0", "ground_truth": [["add(n=3)"], ["double()"]]},
           {"id": "multi_turn_base_1", "ground_truth": [["double()"], ["add(n=10)"], []]}]


@pytest.fixture
def suite(tmp_path, monkeypatch):
    (tmp_path / "func_source_code").mkdir()
    (tmp_path / "func_source_code" / "counter.py").write_text(COUNTER)
    (tmp_path / "q.json").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (tmp_path / "a.json").write_text("".join(json.dumps(a) + "\n" for a in ANSWERS))
    monkeypatch.setenv("COMPASS_BFCL_DIR", str(tmp_path))
    base = load_import_config(CONFIG)
    cfg = base.model_copy(update={"source": str(tmp_path / "q.json"),
                                  "join": base.join.model_copy(update={"source": str(tmp_path / "a.json")})})
    store = ArtifactStore(str(tmp_path / "store"))
    return store, store.open(import_table(cfg, store).table_uri)


def oracle(prompts_seen):
    """A scripted model: in each turn it makes the call the user asked for, then (its result shown back)
    says it is done; it makes no call for a request it cannot serve."""
    def generate(model, tok, batch, *, n, max_new_tokens, temperature, seed):
        out = []
        for p in batch:
            prompts_seen.append(p)
            last_user = p.rsplit("User: ", 1)[1]
            if "Tool results:" in last_user:
                text = "Done."
            elif m := re.match(r"Add (\d+)", last_user):
                text = '<tool_call>{"name": "add", "arguments": {"n": %s}}</tool_call>' % m.group(1)
            elif last_user.startswith(("Double", "Now double")):
                text = '<tool_call>{"name": "double", "arguments": {}}</tool_call>'
            else:
                text = "I cannot do that."
            out.append([{"text": text, "ids": tok(text, add_special_tokens=False)["input_ids"]}] * n)
        return out

    @contextmanager
    def opened(backend, model, tok, workers=0):
        yield generate
    return opened


def test_conversations_are_held_and_scored(world_arts, suite, monkeypatch):
    store, table = suite
    seen: list[str] = []
    monkeypatch.setattr(evaluation, "open_sampler", oracle(seen))
    res = evaluation.run(EvalConfig(max_new_tokens=16), {"model": world_arts["base"], "suites": table}, store)
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    assert {r["prompt_id"]: (r["score"], r["reason"]) for r in rows} == \
        {"multi_turn_base_0": (1.0, None), "multi_turn_base_1": (1.0, None)}
    conv = json.loads(next(r["response"] for r in rows if r["prompt_id"] == "multi_turn_base_1"))
    assert len(conv) == 3 and conv[2] == ["I cannot do that."] and conv[0][1] == "Done."
    # the second reply of the first turn saw its call's result, computed from the starting state (1 * 2)
    assert any('Tool results: ["{\\"value\\": 2}"]' in p and p.endswith("Assistant:") for p in seen)
    # the tools offered are the class's public methods, described from their signatures and docstrings
    assert '"name": "add", "description": "Add n to the counter."' in seen[0]
    assert '"n": {"type": "integer"}' in seen[0]


def test_a_real_checkpoint_holds_the_conversation(world_arts, suite):
    """The tiny base model (no tool use learned): every sample is a conversation of the row's turns."""
    store, table = suite
    res = evaluation.run(EvalConfig(max_new_tokens=8), {"model": world_arts["base"], "suites": table}, store)
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    assert sorted(len(json.loads(r["response"])) for r in rows) == [2, 3]
    assert all(r["suite"] == "bfcl_multi_turn" and r["score"] in (0.0, 1.0) for r in rows)
