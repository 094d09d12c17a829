"""`import compass` makes transformers' import cheaper (compass/transformers_import.py): a process that builds a
model never imports scikit-learn or SciPy (both still import for whoever asks), transformers' lazy table and its
distribution map come from a disk cache that equals what transformers computes itself, the cache is recomputed
when what it depends on changes, and the opt-out leaves transformers as it is."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from compass import transformers_import as ti

PROBE = """
import json, sys
import compass
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
tok = build_tokenizer("")
model = build_model(ModelConfig(), tok, seed=0)
import transformers, transformers.utils
from transformers.generation import candidate_generator
from transformers.loss import loss_for_object_detection
from transformers.utils import import_utils
before = {m: m in sys.modules for m in ("sklearn", "scipy")}
import sklearn.metrics, scipy.optimize      # lm-eval's metrics still have them
lazy = sorted(transformers._class_to_module.items())
print(json.dumps({"before": before,
                  "in_candidate_generator": candidate_generator.is_sklearn_available(),
                  "in_detection_loss": loss_for_object_detection.is_scipy_available(),
                  "elsewhere": [transformers.utils.is_sklearn_available(), transformers.utils.is_scipy_available()],
                  "imported": [callable(sklearn.metrics.roc_curve), callable(scipy.optimize.linear_sum_assignment)],
                  "lazy": lazy, "distributions": import_utils.PACKAGE_DISTRIBUTION_MAPPING}))
"""


def _probe(cache, **env) -> dict:
    env = {**os.environ, "COMPASS_CACHE": str(cache), ti.OPT_OUT: "0", **env}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_model_builds_without_sklearn_or_scipy_from_a_cache_equal_to_transformers_own(tmp_path):
    as_is = _probe(tmp_path / "as_is", **{ti.OPT_OUT: "1"})
    assert as_is["before"] == {"sklearn": True, "scipy": True}
    assert as_is["in_candidate_generator"] and as_is["in_detection_loss"]
    assert not (tmp_path / "as_is").exists()                   # the opt-out writes no cache

    cold = _probe(tmp_path / "cache")
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "cache" / "transformers-import").iterdir())
    assert "distributions" in files and files.count("structure") >= 2     # the models folder, twice over
    warm = _probe(tmp_path / "cache")
    for got in (cold, warm):
        assert got["before"] == {"sklearn": False, "scipy": False}
        assert not got["in_candidate_generator"] and not got["in_detection_loss"]
        assert got["elsewhere"] == [True, True]                 # every other caller sees them installed
        assert got["imported"] == [True, True]
        assert got["lazy"] == as_is["lazy"]                     # the same ~4,000 lazy names, module for module
        assert got["distributions"] == as_is["distributions"]
    assert len(as_is["lazy"]) > 1000


def _counting(result):
    calls = []

    def compute(*args):
        calls.append(args)
        return result() if callable(result) else result
    return compute, calls


def test_import_structure_cache_is_read_back_and_recomputed_when_its_folder_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_CACHE", str(tmp_path / "cache"))
    models = tmp_path / "models"
    models.mkdir()
    structure = {frozenset(): {"a.modeling_a": {"AModel", "APreTrainedModel"}},
                 frozenset({"tokenizers"}): {"a.tokenization_a_fast": {"ATokenizerFast"}}}
    define, calls = _counting(structure)

    assert ti.disk_cached_import_structure(define)(models, "models") == structure
    again = ti.disk_cached_import_structure(define)             # a new process: its own in-memory cache
    assert again(models, "models") == structure and len(calls) == 1
    assert again(models, None) == structure and len(calls) == 2  # another prefix is another entry

    (models / "b").mkdir()                                      # a model folder added: the folder's mtime moves
    os.utime(models, ns=(1, 1))
    assert ti.disk_cached_import_structure(define)(models, "models") == structure and len(calls) == 3

    for f in (tmp_path / "cache" / "transformers-import").iterdir():
        f.write_text("{half a file")                            # unreadable: recomputed, not raised
    assert ti.disk_cached_import_structure(define)(models, "models") == structure and len(calls) == 4


def test_distributions_cache_follows_every_sys_path_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    compute, calls = _counting(lambda: {"yaml": ["PyYAML"], "numpy": ["numpy"]})

    assert ti.cached_packages_distributions(compute) == {"yaml": ["PyYAML"], "numpy": ["numpy"]}
    assert ti.cached_packages_distributions(compute) == {"yaml": ["PyYAML"], "numpy": ["numpy"]}
    assert len(calls) == 1
    (site / "newpkg-1.0.dist-info").mkdir()                     # an install
    os.utime(site, ns=(2, 2))
    ti.cached_packages_distributions(compute)
    assert len(calls) == 2


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("COMPASS_CACHE", str(blocker))
    compute, calls = _counting({"x": ["x"]})
    assert ti.cached_packages_distributions(compute) == {"x": ["x"]}
    assert ti.cached_packages_distributions(compute) == {"x": ["x"]} and len(calls) == 2
