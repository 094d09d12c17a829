"""docs/cluster.md names only settings that exist: RL config keys and Prefect settings."""
from __future__ import annotations

import re

from tests.deploy.deploy_files import ROOT

DOC = (ROOT / "docs" / "cluster.md").read_text()


def _has_path(model, path: str) -> bool:
    for part in path.split("."):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return False
        model = fields[part].annotation
    return True


def test_rl_keys_in_the_doc_are_config_keys():
    from compass.rl.config import RLConfig
    from stages.domain_rl.config import DomainRLConfig
    keys = set(re.findall(r"`((?:sampling|rollout|trainer|reward)\.[a-z_]+)`", DOC))
    assert len(keys) >= 8, keys
    for key in sorted(keys):
        assert _has_path(RLConfig, key), f"docs/cluster.md: `{key}` is not an RL config key"
    for key in re.findall(r"`domain_rl\.([a-z_]+)`", DOC):
        assert key in DomainRLConfig.model_fields, key


def test_prefect_settings_in_the_doc_exist():
    import prefect.settings
    names = set(re.findall(r"\b(PREFECT_[A-Z_]*[A-Z])\b", DOC))
    assert "PREFECT_SERVER_DATABASE_CONNECTION_URL" in names
    for name in sorted(names):
        assert hasattr(prefect.settings, name), f"docs/cluster.md: {name} is not a prefect 3.8.8 setting"
