"""Config loading: YAML validated by pydantic at the edge.

Every model forbids unknown keys; an error names the file, the dotted path of
the bad key and, for a misspelling, the key that was probably meant (for a key a
model moved, its new place: ``moved_key_error``).
"""
from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from compass.credentials import CredentialsInConfig

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"


class ComputeSettings(StrictModel):
    """Where a model computes and in what precision (resolved by ``compass.lm.device``, the one place that
    decides). The defaults take the GPU when there is one, in bf16 mixed precision, and compute on the CPU in
    fp32 otherwise."""
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (the GPU when torch sees one, else "
                                                                    "the CPU), cpu, cuda or cuda:N")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 on a GPU, fp32 on the CPU; bf16 is mixed precision (fp32 master weights, "
                            "gradients and optimizer state; the forward and backward under autocast)")


class RankSettings(StrictModel):
    """Where a trainer's ranks run: one in this process (``ranks: 1``), or ``ranks`` Ray actors in a placement
    group (compass.dist.rank_group), NCCL between GPUs and gloo on the CPU. The RL trainers' ``trainer.backend``
    and the SFT loop's settings (sft, genrm warm start) take these keys."""
    ranks: int = Field(1, ge=1, description="trainer processes (ranks) in one torch.distributed group")
    gpus_per_rank: float = Field(0.0, ge=0, description="with ranks > 1: Ray GPUs each rank reserves (1 on a "
                                                        "GPU cluster; 0 on the CPU)")
    cpus_per_rank: float = Field(1.0, ge=0, description="with ranks > 1: Ray CPUs each rank reserves")
    threads_per_rank: int | None = Field(None, ge=1, description="torch threads per rank (None: Ray's default "
                                                                 "for the actor)")
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="Ray placement-group strategy for the ranks: PACK fills a node first, SPREAD puts "
                            "them on different nodes, STRICT_* refuses otherwise")

    @model_validator(mode="after")
    def _reserves_something(self):
        if 0 < self.gpus_per_rank < 1:
            raise ValueError(f"gpus_per_rank {self.gpus_per_rank}: a rank takes whole GPUs (NCCL "
                             f"refuses two ranks on one GPU)")
        if self.ranks > 1 and not (self.gpus_per_rank or self.cpus_per_rank):
            raise ValueError("ranks > 1 needs gpus_per_rank or cpus_per_rank above 0 (a Ray "
                             "placement group bundle must reserve something)")
        return self


class MegatronParallelSettings(StrictModel):
    """Megatron-core's parallel sizes over a trainer's ``ranks`` (the megatron RL trainer's and the SFT stage's
    ``backend: megatron``); data parallelism is what they leave: ``ranks / (tensor_parallel x pipeline_parallel)``."""
    tensor_parallel: int = Field(1, ge=1, description="megatron backend: ranks one layer's weights are split over "
                                                      "(megatron TP, with sequence parallelism)")
    pipeline_parallel: int = Field(1, ge=1, description="megatron backend: stages the layers are split into "
                                                        "(megatron PP)")
    expert_parallel: int = Field(1, ge=1, description="megatron backend: ranks the experts of each MoE layer are "
                                                      "spread over (megatron EP)")
    distributed_optimizer: bool = Field(False, description="megatron backend: AdamW's state sharded over the "
                                                           "data-parallel ranks (ZeRO-1: torch's "
                                                           "ZeroRedundancyOptimizer over megatron's data-parallel "
                                                           "groups; compass.lm.megatron_optimizer), not whole on "
                                                           "each; the same update")

    @model_validator(mode="after")
    def _sizes_fit(self):
        ranks = getattr(self, "ranks", 1)
        tp_pp = self.tensor_parallel * self.pipeline_parallel
        if ranks % tp_pp:
            raise ValueError(f"ranks {ranks} is not a multiple of tensor_parallel x pipeline_parallel = {tp_pp}")
        tp_ep_pp = tp_pp * self.expert_parallel
        if ranks % tp_ep_pp:      # experts are also cut over the tensor-parallel ranks
            raise ValueError(f"ranks {ranks} is not a multiple of tensor_parallel x expert_parallel x "
                             f"pipeline_parallel = {tp_ep_pp}")
        return self


class ConfigError(ValueError):
    """A config that does not validate; str() is one line per problem."""


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models in an annotation (``Model``, ``Model | None``, a union of several)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _tagged(models: list[type[BaseModel]], discriminator: str, tag) -> type[BaseModel] | None:
    """The member of a discriminated union whose ``discriminator`` field is the literal ``tag``."""
    for m in models:
        field = m.model_fields.get(discriminator)
        if field is not None and tag in typing.get_args(field.annotation):
            return m
    return None


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names allowed at ``loc`` (for 'did you mean')."""
    cur: type[BaseModel] | None = model
    parts = list(loc[:-1])
    while parts:
        field = cur.model_fields.get(parts.pop(0))
        if field is None:
            return []
        models = _models(field.annotation)
        if isinstance(field.discriminator, str) and parts:   # pydantic puts the member's tag in the loc
            cur = _tagged(models, field.discriminator, parts.pop(0))
        else:
            cur = models[0] if models else None
        if cur is None:
            return []
    keys = list(cur.model_fields)
    keys += [f.alias for f in cur.model_fields.values() if f.alias and f.alias not in keys]
    return keys


MOVED_KEY = "moved_key"


def moved_key_error(messages: list[str]) -> PydanticCustomError:
    """What a ``model_validator(mode="before")`` raises for keys its model moved (``messages`` name the new
    keys); reported as given, without echoing the whole input."""
    return PydanticCustomError(MOVED_KEY, "{moved}", {"moved": "; ".join(messages)})


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


def suggest_key(bad: str, known: list[str]) -> str | None:
    """The known key that ``bad`` most likely misspells, or None."""
    if not known:
        return None
    close = difflib.get_close_matches(bad, known, n=1)
    if close:
        return close[0]
    for k in known:  # batchsize -> batch_size, Batch-Size -> batch_size
        if _norm(k) == _norm(bad):
            return k
    parts = [p for p in bad.lower().replace("-", "_").split("_") if p]
    initials = "".join(p[0] for p in parts)
    for k in known:  # learning_rate -> lr
        if len(parts) > 1 and k.lower() == initials:
            return k
    # lr_rate -> lr, batch -> batch_size: one key extends the other
    ext = [k for k in known if len(k) >= 2 and len(bad) >= 2 and
           (bad.lower().startswith(k.lower()) or k.lower().startswith(bad.lower()))]
    if ext:
        return max(ext, key=len)
    close = difflib.get_close_matches(bad, known, n=1, cutoff=0.5)
    return close[0] if close else None


def format_validation_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
            close = suggest_key(str(loc[-1]), _known_keys(model, loc))
            if close:
                msg += f" (did you mean '{close}'?)"
        elif e["type"] == MOVED_KEY:
            msg = e["msg"]
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif isinstance(e.get("ctx", {}).get("error"), CredentialsInConfig):
            msg = str(e["ctx"]["error"])           # names the key; the input (the secret) is not echoed
        else:
            got = repr(e.get("input"))
            got = got if len(got) <= 80 else got[:77] + "..."
            msg = f"{e['msg']} (got {got})"
        line = " ".join(f"config error in {source}: {path}: {msg}".split())  # one line, whatever the message
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


def validate(model: type[M], data: dict, source: str = "<config>") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, model, source)) from None


def read_yaml(path: str | Path, section: str | None = None) -> dict:
    """A YAML mapping from ``path`` (or its ``section``), with one-line errors for every way it can fail."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config error: file not found: {path}")
    if path.is_dir():
        raise ConfigError(f"config error: {path} is a folder; give a YAML file")
    try:
        with open(path, encoding="utf-8") as f:    # a stream, so YAML's marks name the file
            data = yaml.safe_load(f) or {}
    except UnicodeDecodeError as e:
        raise ConfigError(f"config error in {path}: not UTF-8 text (byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ConfigError(" ".join(f"config error in {path}: not valid YAML: {e}".split())) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error in {path}: top level must be a mapping, got {type(data).__name__}")
    if section is None:
        return data
    if section not in data:
        raise ConfigError(f"config error in {path}: no section '{section}' (sections: {', '.join(map(str, data))})")
    if not isinstance(data[section], dict):
        raise ConfigError(f"config error in {path}: {section}: must be a mapping")
    return data[section]


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` laid onto ``base``: mappings merge key by key, anything else (lists too) replaces. A mapping
    that names another ``kind`` (a discriminated union: ``loss: {kind: espo}`` over ``{kind: ppo_clip, …}``)
    replaces the base's whole, since the old kind's keys mean nothing to the new one."""
    out = dict(base)
    for k, v in over.items():
        merge = isinstance(v, dict) and isinstance(out.get(k), dict) and v.get("kind", out[k].get("kind")) == \
            out[k].get("kind")
        out[k] = deep_merge(out[k], v) if merge else v
    return out


def load_yaml(model: type[M], path: str | Path) -> M:
    return validate(model, read_yaml(path), str(path))
