"""Held-out evaluation: both judges on every pair in both orders, metrics, judgements rows, flips."""
from __future__ import annotations

import math

from compass.lm.chat import chat_prefix, sample
from stages.genrm.bradley_terry import bt_verdict, encode_response, score
from compass.rl.algos.advantage_flips import FlipCount, group_advantages
from stages.genrm.pairs import pair_id
from compass.gym.genrm_verdict import SWAP, judge_prompt, parse_judgement


def generate(model, tok, prompts: list[str], *, max_new_tokens: int, batch_size: int = 32) -> list[str]:
    """Greedy judgements, in order."""
    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        gens = sample(model, tok, prompts[i:i + batch_size], n=1, max_new_tokens=max_new_tokens, temperature=0.0)
        out.extend(g[0]["text"] for g in gens)
    return out


def fits_context(tok, row: dict, limit: int) -> bool:
    """Whether the judge prompt of ``row`` (chat-wrapped) is at most ``limit`` tokens."""
    return len(tok(chat_prefix(tok, judge_prompt(row["prompt"], row["response_a"], row["response_b"])),
                   add_special_tokens=False)["input_ids"]) <= limit


def judgement_row(judge: str, r: dict, first: str | None, second_raw: str | None) -> dict:
    """One ``judgements`` row: ``second_raw`` is the verdict on the swapped pair, mapped back here."""
    second = SWAP[second_raw] if second_raw is not None else None
    return {"judge": judge, "pair_id": pair_id(r), "label": r["label"], "verdict": first,
            "verdict_swapped": second, "correct": first == r["label"],
            "consistent": None if first is None or second is None else first == second}


def genrm_judgements(model, tok, rows: list[dict], *, max_new_tokens: int) -> tuple[list[dict], int]:
    """Judgements rows of the GenRM on ``rows`` (each asked as (A, B) and as (B, A)) and how many of the
    2·len(rows) generations had the full structure."""
    asks = [judge_prompt(r["prompt"], r["response_a"], r["response_b"]) for r in rows]
    asks += [judge_prompt(r["prompt"], r["response_b"], r["response_a"]) for r in rows]
    parsed = [parse_judgement(t) for t in generate(model, tok, asks, max_new_tokens=max_new_tokens)]
    n = len(rows)
    out = [judgement_row("genrm", r, parsed[i].verdict, parsed[n + i].verdict) for i, r in enumerate(rows)]
    return out, sum(p.format_ok for p in parsed)


def bt_encode(tok, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    """(ids_a, ids_b) per pair: ``encode_response`` of each response, never cut."""
    return [(encode_response(tok, r["prompt"], r["response_a"], 10 ** 9),
             encode_response(tok, r["prompt"], r["response_b"], 10 ** 9)) for r in rows]


def bt_scores(rm, tok, rows: list[dict], max_len: int,
              encoded: list[tuple[list[int], list[int]]] | None = None) -> list[tuple[float, float]]:
    """(r_a, r_b) per pair; a response too long for ``max_len`` is cut to its last ``max_len`` tokens.
    ``encoded``: ``bt_encode(tok, rows)`` when the caller has it already (not tokenized again)."""
    enc = bt_encode(tok, rows) if encoded is None else encoded
    s = score(rm, tok, [ids[-max_len:] for pair in enc for ids in pair])
    return [(s[2 * i], s[2 * i + 1]) for i in range(len(enc))]


def bt_judgements(scores: list[tuple[float, float]], rows: list[dict], tau: float) -> list[dict]:
    """A scalar model judges both orders identically, so its rows are always swap-consistent."""
    return [judgement_row("bradley_terry", r, bt_verdict(a, b, tau), bt_verdict(b, a, tau))
            for r, (a, b) in zip(rows, scores)]


def _rate(k: int, n: int) -> tuple[float | None, float | None]:
    if not n:
        return None, None
    p = k / n
    return p, math.sqrt(p * (1 - p) / n)


def judge_metrics(rows: list[dict]) -> dict:
    """accuracy (A,B order), tie / non-tie accuracy, swap-consistency and verdict rates, with standard errors."""
    ties = [r for r in rows if r["label"] == "TIE"]
    non = [r for r in rows if r["label"] != "TIE"]
    m = {"pairs": len(rows), "ties": len(ties)}
    for name, sub in (("accuracy", rows), ("tie_accuracy", ties), ("non_tie_accuracy", non)):
        m[name], m[f"{name}_se"] = _rate(sum(r["correct"] for r in sub), len(sub))
    both = [r for r in rows if r["verdict_swapped"] is not None]
    m["accuracy_swapped"], _ = _rate(sum(r["verdict_swapped"] == r["label"] for r in both), len(rows))
    m["verdict_rate"], _ = _rate(sum(r["verdict"] is not None for r in rows), len(rows))
    m["swap_consistency"], _ = _rate(sum(bool(r["consistent"]) for r in rows), len(rows))
    # the swap-consistent verdict: the common verdict of both orders, TIE when they disagree (or one is missing)
    cons = [(r["verdict"] if r["consistent"] else "TIE") == r["label"] for r in rows]
    for name, keep in (("consistent_accuracy", lambda r: True), ("consistent_tie_accuracy", lambda r: r["label"] == "TIE"),
                       ("consistent_non_tie_accuracy", lambda r: r["label"] != "TIE")):
        sel = [c for c, r in zip(cons, rows) if keep(r)]
        m[name], m[f"{name}_se"] = _rate(sum(sel), len(sel))
    return m


# -- advantage flipping on held-out groups --------------------------------------------------

def true_rewards(label: str) -> list[float]:
    """A pair as a GRPO group of its two responses: the better one (both, on a tie) is the correct one."""
    return {"A": [1.0, 0.0], "B": [0.0, 1.0], "TIE": [1.0, 1.0]}[label]


def genrm_reference_rewards(model, tok, rows: list[dict], *, max_new_tokens: int) -> list[tuple[list[float], list]]:
    """The paper's RL rule: each response judged against the pair's ``reference`` (response = A, reference = B);
    reward 1 for A or TIE (better or equal), else 0 (``compass.gym.genrm_judge.reward_for``)."""
    from compass.gym.genrm_judge import reward_for
    asks = [judge_prompt(r["prompt"], resp, r["reference"]) for r in rows for resp in (r["response_a"], r["response_b"])]
    v = [parse_judgement(t).verdict for t in generate(model, tok, asks, max_new_tokens=max_new_tokens)]
    return [([reward_for(v[2 * i]), reward_for(v[2 * i + 1])], [v[2 * i], v[2 * i + 1]]) for i in range(len(rows))]


def count_flips(rows: list[dict], bt: list[tuple[float, float]], genrm: list[tuple[list[float], list]],
                n_examples: int) -> dict:
    """Flip counts (``compass.rl.algos.advantage_flips``) of BT and GenRM rewards on the same groups; ``flips_avoided``:
    responses BT flips whose GenRM advantage has the sign of the true advantage (0 in uniform groups). Examples: cases BT flips and the GenRM does not, then any
    the GenRM flips."""
    bt_c, g_c = FlipCount(), FlipCount()
    avoided = 0
    examples, genrm_flips = [], []
    for r, (a, b), (g_rew, g_ver) in zip(rows, bt, genrm):
        t = true_rewards(r["label"])
        (bt_adv, bt_f), (g_adv, g_f) = bt_c.add(t, [a, b]), g_c.add(t, g_rew)
        # avoided: BT flips it, and the GenRM's advantage has the true advantage's sign (0 in a uniform group);
        # a judge that gives a mixed group equal rewards (advantage 0) avoids nothing: it gives no signal
        true_adv = group_advantages(t)
        avoided += sum(x and (y > 1e-6) - (y < -1e-6) == (z > 1e-6) - (z < -1e-6)
                       for x, y, z in zip(bt_f, g_adv, true_adv))
        case = {"pair_id": pair_id(r), "prompt": r["prompt"], "reference": r["reference"],
                "responses": [r["response_a"], r["response_b"]], "true_reward": t, "bt_score": [a, b],
                "bt_advantage": bt_adv, "genrm_verdict": g_ver, "genrm_reward": g_rew, "genrm_advantage": g_adv}
        if any(g_f):
            genrm_flips.append(case)
        elif any(bt_f) and len(examples) < n_examples:
            examples.append(case)
    examples += genrm_flips[:max(0, n_examples - len(examples))]
    return {"bradley_terry": bt_c.as_dict(), "genrm": g_c.as_dict(), "flips_avoided": avoided,
            "examples": examples}
