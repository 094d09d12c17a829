"""The pipeline DAG (docs/architecture.md §1) as data: which stage runs fill which artifact names.

A node is one stage run. Its input slots name the artifacts it reads; its
output slots name the artifacts it writes. The same stage may run twice under
different names (SFT: Long-CoT and domain). A node's ``optional`` slots are read
when the run has their artifact and never make the plan run their producers.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    run_name: str                 # unique; also the key of its config in PipelineConfig
    stage: str                    # stage package under stages/
    inputs: dict[str, str]        # slot -> artifact name
    outputs: dict[str, str]       # slot -> artifact name
    # slots read when the run made (or the user provided) their artifact; they never make a run plan
    # their producers (evaluation reads every checkpoint the run produced, but evaluating a provided
    # final checkpoint needs none of the others)
    optional: frozenset[str] = frozenset()


PIPELINE: tuple[Node, ...] = (
    Node("world", "world", {},
         {"raw_sft": "raw_sft", "raw_prompts": "raw_prompts", "preferences": "preference_pairs",
          "eval_prompts": "eval_prompts", "base": "base_ckpt"}),
    Node("data_filter", "data_filter",
         {"sft": "raw_sft", "prompts": "raw_prompts", "eval": "eval_prompts", "base": "base_ckpt"},
         {"sft_longcot": "sft_longcot", "sft_domain": "sft_domain", "rl_prompts": "rl_prompts",
          "quarantine": "quarantine"}),
    # each parent may replay a share of the other's rows (sft.replay_fraction): parents that keep each other's
    # skills merge
    Node("sft_longcot", "sft", {"base": "base_ckpt", "data": "sft_longcot", "eval": "eval_prompts",
                                "replay": "sft_domain"},
         {"checkpoint": "thinking_ckpt"}, optional=frozenset({"replay"})),
    Node("sft_domain", "sft", {"base": "base_ckpt", "data": "sft_domain", "eval": "eval_prompts",
                               "replay": "sft_longcot"},
         {"checkpoint": "domain_ckpt"}, optional=frozenset({"replay"})),
    # the merge sweep picks its candidate on RL prompts: unseen by SFT, and not the held-out eval suites
    Node("merge", "merge", {"base": "base_ckpt", "thinking": "thinking_ckpt", "domain": "domain_ckpt",
                            "dev": "rl_prompts"},
         {"checkpoint": "thinking_base", "sweep": "merge_sweep"}),
    # the judge starts from the Long-CoT model: a reasoning model, as the paper's GenRM base (§2.5.2)
    Node("genrm", "genrm", {"base": "thinking_ckpt", "pairs": "preference_pairs"},
         {"checkpoint": "genrm_ckpt", "judgements": "genrm_judgements", "quarantine": "genrm_quarantine"}),
    Node("reasoning_rl", "reasoning_rl", {"policy": "thinking_base", "prompts": "rl_prompts"},
         {"checkpoint": "ckpt_r1", "prompt_stats": "prompt_stats_r1", "rollouts": "rollouts_r1"}),
    # phase 2's open-ended prompts are rewarded by the GenRM judge (genrm_ckpt)
    Node("domain_rl", "domain_rl",
         {"policy": "ckpt_r1", "prompts": "rl_prompts", "carryover": "prompt_stats_r1", "genrm": "genrm_ckpt"},
         {"checkpoint": "ckpt_final", "prompt_stats": "prompt_stats_domain", "rollouts": "rollouts_domain"}),
    # the open-ended suites (product titles) are judged by the run's GenRM, as the paper reports them
    Node("evaluation", "evaluation",
         {"model": "ckpt_final", "suites": "eval_prompts", "base": "base_ckpt", "sft_longcot": "thinking_ckpt",
          "sft_domain": "domain_ckpt", "merged": "thinking_base", "phase1": "ckpt_r1", "genrm": "genrm_ckpt"},
         {"results": "eval_results", "report": "eval_report"},
         optional=frozenset({"base", "sft_longcot", "sft_domain", "merged", "phase1", "genrm"})),
)

NODES = {n.run_name: n for n in PIPELINE}


def producers(nodes=PIPELINE) -> dict[str, Node]:
    """artifact name -> the node that writes it."""
    out: dict[str, Node] = {}
    for n in nodes:
        for name in n.outputs.values():
            if name in out:
                raise ValueError(f"artifact '{name}' is written by both {out[name].run_name} and {n.run_name}")
            out[name] = n
    return out


def plan(provided: set[str], until: str | None = None, nodes=PIPELINE) -> list[Node]:
    """The nodes to run, in DAG order, so that every needed artifact is made.

    ``provided``: artifact names the user supplies from the store (``--from-artifact``):
    their producers, and whatever only they needed, are skipped.
    ``until``: stop at this run (its outputs are the targets) instead of the whole DAG.
    """
    prod = producers(nodes)
    unknown = sorted(provided - set(prod))
    if unknown:
        raise ValueError(f"--from-artifact: no pipeline artifact is named {unknown}; known: {sorted(prod)}")
    if until is not None:
        if until not in {n.run_name for n in nodes}:
            raise ValueError(f"--until: no stage run named '{until}'; known: {[n.run_name for n in nodes]}")
        targets = set(next(n for n in nodes if n.run_name == until).outputs.values())
    else:
        # The terminal runs (none of their outputs feeds another run) are the goal. Side outputs
        # of inner runs (quarantine, rollouts) are made when their run is, not targets themselves.
        consumed = {a for n in nodes for a in n.inputs.values()}
        targets = {a for n in nodes if not set(n.outputs.values()) & consumed for a in n.outputs.values()}
    needed = set(targets) - provided
    for n in reversed(nodes):
        if any(a in needed for a in n.outputs.values()):
            needed |= {a for slot, a in n.inputs.items() if slot not in n.optional} - provided
    return [n for n in nodes if any(a in needed for a in n.outputs.values())]
