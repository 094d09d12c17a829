"""RLConfig: the nested layout keeps the flat one's defaults, old flat keys name their new place, and the
advantage and loss are chosen by ``kind`` with settings that are their functions' keywords."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import ValidationError

from compass.config import ConfigError, load_yaml, validate
from compass.rl.algos.advantages import ADVANTAGES
from compass.rl.config import (MOVED, DrGRPOAdvantage, ESPOLoss, GRPOAdvantage, GSPOLoss, PPOClipLoss, RLConfig,
                               RLZVPAdvantage)
from compass.rl.algos.losses import POLICY_LOSSES

REPO = Path(__file__).resolve().parents[3]

# the flat RLConfig's defaults, before it was nested
FLAT_DEFAULTS = {
    "seed": 0, "steps": 4, "prompts_per_step": 8, "group_size": 4, "max_new_tokens": 48, "temperature": 1.0,
    "lr": 5e-5, "weight_decay": 0.0, "max_grad_norm": 1.0, "advantage": "grpo", "advantage_eps": 1e-6,
    "policy_loss": "ppo_clip_token_mean", "clip_eps": 0.2, "pass_threshold": 0.5, "espo_alpha": 2.0, "espo_groups": 2,
    "reward_workers": 0, "reward_timeout_s": 30.0, "mini_batches": 1, "clip_eps_high": None, "zvp_alpha": 0.1,
    "rollout_backend": "auto", "rollout_dtype": "float32", "rollout_workers": 0, "trainer_actor": False,
    "trainer_backend": "torch", "router_replay": False, "drop_zero_variance": False, "dynamic_sampling": False,
    "dynamic_sampling_max_rounds": 4, "retire_solved": False, "pass_rate_filter": None, "rollout_token_budget": 0,
    "checkpoint_every": 5,
}
# defaults changed since, on measurement: ESPO's α re-derived for this project's |V| and entropy scale
# (docs/rl.md "α for this project")
# rollout_dtype: "auto" is float32 for every in-process backend, as before, and bf16 for vLLM on a GPU
RETUNED = {"espo_alpha": 0.1, "rollout_dtype": "auto"}
KIND_OF = {"zvp_alpha": RLZVPAdvantage, "espo_alpha": ESPOLoss, "espo_groups": ESPOLoss}   # kind-specific keys
ADVANTAGE_KINDS = {"grpo": GRPOAdvantage, "dr_grpo": DrGRPOAdvantage, "rl_zvp": RLZVPAdvantage}
LOSS_KINDS = {"ppo_clip_token_mean": PPOClipLoss, "gspo": GSPOLoss, "espo": ESPOLoss}


def test_every_flat_key_has_a_nested_field_with_the_same_default():
    cfg = RLConfig()
    unmoved = {"seed", "steps", "rollout_token_budget", "checkpoint_every"}
    assert set(FLAT_DEFAULTS) == set(MOVED) | unmoved | {"advantage", "policy_loss"}
    for key in unmoved:
        assert getattr(cfg, key) == FLAT_DEFAULTS[key], key
    for key, where in MOVED.items():
        *path, field = where.split()[0].split(".")
        holder = KIND_OF[key]() if key in KIND_OF else cfg
        for part in ([] if key in KIND_OF else path):
            holder = getattr(holder, part)
        assert getattr(holder, field) == RETUNED.get(key, FLAT_DEFAULTS[key]), key
    assert (cfg.advantage.kind, cfg.loss.kind) == (FLAT_DEFAULTS["advantage"], FLAT_DEFAULTS["policy_loss"])
    # the loss's settings default as the flat config passed them, GSPO included (its clip_eps was clip_eps)
    assert GSPOLoss().model_dump() == {"kind": "gspo", "clip_eps": 0.2, "clip_eps_high": None}
    assert RLZVPAdvantage().model_dump() == {"kind": "rl_zvp", "eps": 1e-6, "alpha": 0.1}


@pytest.mark.parametrize("key", sorted(MOVED))
def test_an_old_flat_key_names_its_new_place(key):
    new = MOVED[key].split()[0]
    with pytest.raises(ConfigError, match=rf"rl.yaml: \(top level\): `{key}` moved to `{new}"):
        validate(RLConfig, {"steps": 2, key: FLAT_DEFAULTS[key]}, "rl.yaml")
    with pytest.raises(ValidationError, match=f"`{key}` moved to `{new}"):            # from Python too
        RLConfig(**{key: FLAT_DEFAULTS[key]})


def test_an_algorithm_named_by_a_plain_string_names_the_kind_form():
    with pytest.raises(ConfigError, match=r"`policy_loss: espo` is now `loss: \{kind: espo\}`"):
        validate(RLConfig, {"policy_loss": "espo"})
    with pytest.raises(ConfigError, match=r"`advantage: grpo` is now `advantage: \{kind: grpo\}`"):
        validate(RLConfig, {"advantage": "grpo"})
    with pytest.raises(ConfigError, match=r"`loss: gspo` is now `loss: \{kind: gspo\}`"):
        validate(RLConfig, {"loss": "gspo"})
    cfg = RLConfig()
    with pytest.raises(ValidationError, match="is now `advantage: {kind: rl_zvp}`"):     # on assignment too
        cfg.advantage = "rl_zvp"
    # every old key in one file: one line that names them all
    with pytest.raises(ConfigError) as ei:
        validate(RLConfig, {"group_size": 4, "espo_alpha": 2, "policy_loss": "espo"})
    (line,) = str(ei.value).splitlines()
    assert "`group_size` moved to `sampling.group_size`" in line and "`espo_alpha` moved to `loss.alpha" in line


@pytest.mark.parametrize("kind,cls", sorted(ADVANTAGE_KINDS.items()))
def test_the_advantage_kind_picks_its_settings(kind, cls):
    cfg = validate(RLConfig, {"advantage": {"kind": kind}})
    assert type(cfg.advantage) is cls
    assert validate(RLConfig, cfg.model_dump()) == cfg                                # the dump loads back


@pytest.mark.parametrize("kind,cls", sorted(LOSS_KINDS.items()))
def test_the_loss_kind_picks_its_settings(kind, cls):
    cfg = validate(RLConfig, {"loss": {"kind": kind}})
    assert type(cfg.loss) is cls
    assert validate(RLConfig, cfg.model_dump()) == cfg


def test_settings_are_the_keywords_of_the_registered_functions():
    """What the engine passes as ``**settings.model_dump(exclude={"kind"})``: the function's own options."""
    assert set(ADVANTAGE_KINDS) == set(ADVANTAGES) and set(LOSS_KINDS) == set(POLICY_LOSSES)
    for kinds, registry, common in ((ADVANTAGE_KINDS, ADVANTAGES, {"entropy", "pass_threshold"}),
                                    (LOSS_KINDS, POLICY_LOSSES, {"entropy", "vocab_size"})):
        for kind, cls in kinds.items():
            params = inspect.signature(registry[kind]).parameters.values()
            own = {p.name for p in params if p.kind is p.KEYWORD_ONLY} - common
            assert set(cls().model_dump(exclude={"kind"})) == own, kind


def test_an_unknown_kind_lists_the_known_ones_and_settings_keep_their_bounds():
    with pytest.raises(ConfigError, match="advantage: .*'gpro'.*expected tags: 'grpo', 'dr_grpo', 'rl_zvp'"):
        validate(RLConfig, {"advantage": {"kind": "gpro"}})
    with pytest.raises(ConfigError, match="loss: .*'ppo'.*expected tags: 'ppo_clip_token_mean', 'gspo', 'espo'"):
        validate(RLConfig, {"loss": {"kind": "ppo"}})
    with pytest.raises(ConfigError, match=r"loss\.espo\.alhpa: unknown key \(did you mean 'alpha'\?\)"):
        validate(RLConfig, {"loss": {"kind": "espo", "alhpa": 1.0}})
    with pytest.raises(ConfigError, match=r"loss\.espo\.clip_eps: unknown key"):        # not an ESPO setting
        validate(RLConfig, {"loss": {"kind": "espo", "clip_eps": 0.1}})
    with pytest.raises(ConfigError, match=r"loss\.ppo_clip_token_mean\.clip_eps: .*less than 1"):
        validate(RLConfig, {"loss": {"kind": "ppo_clip_token_mean", "clip_eps": 1.5}})
    with pytest.raises(ConfigError, match=r"sampling\.group_size: .*greater than or equal to 2"):
        validate(RLConfig, {"sampling": {"group_size": 1}})
    with pytest.raises(ConfigError, match=r"trainer\.lrr: unknown key \(did you mean 'lr'\?\)"):
        validate(RLConfig, {"trainer": {"lrr": 1e-3}})


def test_the_shipped_config_holds_the_values_it_held_flat():
    from compass.dag.config import PipelineConfig
    from stages.genrm.config import _grpo_default
    cfg = load_yaml(PipelineConfig, REPO / "configs" / "tiny.yaml")
    # tiny.yaml: the defaults, 60 steps of 32 prompts and 40 of 16 (compass bench recipe), 96 new tokens, and
    # zero-variance elimination on (the pool graded by the starting policy, the skip, N in {4, 8})
    for section, steps, per_step, pool in ((cfg.reasoning_rl, 60, 32, {"size": 384, "candidates": 1024}),
                                           (cfg.domain_rl, 40, 16, {"size": 256, "candidates": 768})):
        flat = RLConfig(steps=steps, rollout={"max_new_tokens": 96},
                        sampling={"prompts_per_step": per_step, "prefilter": {},
                                  "auto_group_size": {"candidates": [4, 8]},
                                  "pool": {**pool, "drop_never_solved": True}}).model_dump()
        assert {k: v for k, v in section.model_dump().items() if k in flat} == flat
    assert cfg.genrm.grpo == _grpo_default()


@pytest.mark.parametrize("section, data, message", [
    ("rollout", {"backend": "native"}, r"`rollout\.backend: native` is now `rollout\.backend: \{kind: native\}`"),
    ("trainer", {"backend": "megatron"}, r"`trainer\.backend: megatron` is now `trainer\.backend: \{kind: megatron\}`"),
    ("rollout", {"max_batch_rows": 8}, r"`rollout\.max_batch_rows` moved to `rollout\.backend\.max_batch_rows` \(kind native\)"),
    ("rollout", {"quantization": "fp8"}, r"`rollout\.quantization` moved to `rollout\.backend\.quantization` \(kind vllm\)"),
    ("trainer", {"device": "cpu"}, r"`trainer\.device` moved to `trainer\.backend\.device` \(kind torch\)"),
])
def test_a_backend_setting_of_the_old_layout_names_its_new_place(section, data, message):
    with pytest.raises(ConfigError, match=message) as ei:
        validate(RLConfig, {section: data}, "rl.yaml")
    assert len(str(ei.value).splitlines()) == 1


def test_each_backend_kind_carries_its_own_settings():
    """The union on kind: a setting of one backend is an unknown key on another, and the settings a kind
    carries are its class's keyword arguments (what the engine passes)."""
    from compass.rl.rollout.base import ROLLOUT_BACKEND_MODULES, get_rollout_backend
    cfg = validate(RLConfig, {"rollout": {"backend": {"kind": "native", "max_batch_rows": 16}},
                              "trainer": {"backend": {"kind": "torch", "precision": "bf16"}}})
    assert cfg.rollout.backend.max_batch_rows == 16 and cfg.trainer.backend.precision == "bf16"
    assert validate(RLConfig, cfg.model_dump()) == cfg
    assert RLConfig().rollout.backend.kind == "auto" and RLConfig().trainer.backend.kind == "torch"
    with pytest.raises(ConfigError, match=r"rollout\.backend\.hf\.max_batch_rows: unknown key"):
        validate(RLConfig, {"rollout": {"backend": {"kind": "hf", "max_batch_rows": 4}}})
    with pytest.raises(ConfigError, match=r"rollout\.backend\.native\.quantization: unknown key"):
        validate(RLConfig, {"rollout": {"backend": {"kind": "native", "quantization": "fp8"}}})
    with pytest.raises(ConfigError, match=r"trainer\.backend\.megatron\.device: unknown key"):
        validate(RLConfig, {"trainer": {"backend": {"kind": "megatron", "device": "cuda"}}})
    with pytest.raises(ConfigError, match=r"rollout\.backend\.native\.device"):
        validate(RLConfig, {"rollout": {"backend": {"kind": "native", "device": "gpu"}}})
    from compass.rl.config import HfRolloutSettings, NativeRolloutSettings, VllmRolloutSettings
    for kind, settings in (("native", NativeRolloutSettings), ("hf", HfRolloutSettings),
                           ("vllm", VllmRolloutSettings)):
        assert kind in ROLLOUT_BACKEND_MODULES
        params = inspect.signature(get_rollout_backend(kind).__init__).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for name in settings().model_dump(exclude={"kind"}):
            assert name in params or takes_any, (kind, name)


def test_the_backend_names_a_config_offers_are_the_registered_ones():
    """The kinds of rollout.backend and evaluation.backend are the registry's module table (plus auto): a new
    backend cannot be registered without being offered, or offered without being registered."""
    import typing
    from compass.rl.config import RolloutBackendConfig, TrainerBackendConfig
    from compass.rl.rollout.base import ROLLOUT_BACKEND_MODULES
    from compass.rl.trainer.base import TRAINER_BACKEND_MODULES
    from stages.evaluation.config import EvalConfig

    def kinds(union):
        members = typing.get_args(typing.get_args(union)[0])
        return {typing.get_args(m.model_fields["kind"].annotation)[0] for m in members}
    assert kinds(RolloutBackendConfig) == {"auto", *ROLLOUT_BACKEND_MODULES}
    assert kinds(TrainerBackendConfig) == set(TRAINER_BACKEND_MODULES)
    assert set(typing.get_args(EvalConfig.model_fields["backend"].annotation)) == {"auto", *ROLLOUT_BACKEND_MODULES}
