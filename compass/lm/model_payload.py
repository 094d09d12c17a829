"""A Hugging Face causal LM as plain data (config, generation config, dtype, state dict) that another process
(a Ray actor, a rank) turns back into its own copy."""
from __future__ import annotations


def model_payload(model) -> dict:
    """A Hugging Face causal LM as data for :func:`model_from_payload` in another process:
    ``config``, ``generation_config``, ``dtype`` and ``state_dict`` (detached CPU tensors)."""
    return {"config": model.config, "generation_config": getattr(model, "generation_config", None),
            "dtype": next(model.parameters()).dtype,
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}


def model_from_payload(payload: dict):
    """The model :func:`model_payload` described: built from its config, then every weight loaded
    (strict), so it computes exactly what the original does."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(payload["config"], dtype=payload["dtype"])
    with torch.no_grad():
        model.load_state_dict(payload["state_dict"], strict=True)
    if payload["generation_config"] is not None:
        model.generation_config = payload["generation_config"]
    return model
