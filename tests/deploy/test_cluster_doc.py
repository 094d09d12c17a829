"""docs/cluster.md names only settings that exist: RL config keys (to any depth, through the backend kinds), the
RL settings its YAML examples write, and Prefect settings."""
from __future__ import annotations

import re
import typing

import yaml

from tests.deploy.deploy_files import ROOT

DOC = (ROOT / "docs" / "cluster.md").read_text()


def _models(annotation) -> list:
    """The pydantic models in an annotation (a model, ``Model | None``, a discriminated union of backend kinds)."""
    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _has_path(model, path: str) -> bool:
    """``path`` (dotted) is a field of ``model``; below a union, a field of any of its members (a backend kind's)."""
    head, _, rest = path.partition(".")
    field = getattr(model, "model_fields", {}).get(head)
    if field is None:
        return False
    return not rest or any(_has_path(m, rest) for m in _models(field.annotation))


def test_rl_keys_in_the_doc_are_config_keys():
    from compass.rl.config import RLConfig
    from stages.domain_rl.config import DomainRLConfig
    keys = set(re.findall(r"`((?:sampling|rollout|trainer|reward)(?:\.[a-z_]+)+)`", DOC))
    assert len(keys) >= 8, keys
    assert any(k.count(".") >= 2 for k in keys), keys          # the backends' own keys are checked too
    for key in sorted(keys):
        assert _has_path(RLConfig, key), f"docs/cluster.md: `{key}` is not an RL config key"
    for key in re.findall(r"`domain_rl\.([a-z_]+)`", DOC):
        assert key in DomainRLConfig.model_fields, key


def test_the_docs_rl_examples_validate():
    """Every YAML block of RL settings in the doc (its top-level keys are RLConfig's) validates as written."""
    from compass.rl.config import RLConfig
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC, re.S)]
    rl = [b for b in blocks if isinstance(b, dict) and b and set(b) <= set(RLConfig.model_fields)]
    assert rl, "docs/cluster.md: no YAML example of RL settings"
    for block in rl:
        RLConfig.model_validate(block)


def test_prefect_settings_in_the_doc_exist():
    import prefect.settings
    names = set(re.findall(r"\b(PREFECT_[A-Z_]*[A-Z])\b", DOC))
    assert "PREFECT_SERVER_DATABASE_CONNECTION_URL" in names
    for name in sorted(names):
        assert hasattr(prefect.settings, name), f"docs/cluster.md: {name} is not a prefect 3.8.8 setting"
