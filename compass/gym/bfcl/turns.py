"""BFCL's multi-turn checker, as rules on live objects (standard library only: runs inside the sandbox).

A multi-turn row starts the category's classes from ``initial_config`` (one instance set for the
model, one for the ground truth; each lives across all turns), then per user turn runs the model's
calls on its instances and the ground-truth calls on theirs. After each turn whose ground truth is not
empty:
- the model made at least one call in that turn (else ``empty_turn``);
- every public attribute of each ground-truth instance equals the model instance's (``state_mismatch``);
- every ground-truth result of the turn is among the model's results so far, counted with repeats, in
  any order (``response_mismatch``; a model may have fetched something in an earlier turn).
A turn with empty ground truth (the request cannot be done) is not checked; its calls still run, so the
next turn's state is right. Results are compared as BFCL records them: text as is, a dict as JSON,
anything else as ``str``, a raised error as ``"Error during execution: <message>"``.
"""
import copy
import inspect
import json

# names BFCL refuses to run whatever class offers them
REFUSED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})


def start(classes: dict, initial_config: dict, long_context: bool = False) -> dict:
    """One instance per class name, each loaded with its part of ``initial_config`` (classes with no
    ``_load_scenario`` are stateless)."""
    instances = {}
    for name, cls in classes.items():
        obj = cls()
        if hasattr(obj, "_load_scenario"):
            obj._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
        instances[name] = obj
    return instances


def methods(instances: dict) -> dict:
    """Public method name -> bound method; a later class wins a shared name, as in BFCL."""
    table = {}
    for obj in instances.values():
        for attr, method in inspect.getmembers(obj, predicate=inspect.ismethod):
            if not attr.startswith("_"):
                table[attr] = method
    return table


def record(value) -> str:
    if isinstance(value, str):
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def execute(table: dict, call) -> str:
    """Run one call: ``(name, args, kwargs)`` (a model's) or a call string (the ground truth's, evaluated
    with the methods as its names)."""
    try:
        if isinstance(call, str):
            name = call.split("(", 1)[0].strip().rsplit(".", 1)[-1]
            if name in REFUSED:
                raise Exception(f"Function call {name} is not allowed.")
            return record(eval(call, dict(table)))          # noqa: S307 - trusted ground truth, in the sandbox
        name, args, kwargs = call
        if name in REFUSED:
            raise Exception(f"Function call {name} is not allowed.")
        if name not in table:
            raise NameError(f"name '{name}' is not defined")
        return record(table[name](*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - the error text is the result, as in BFCL
        return f"Error during execution: {e}"


def state_difference(model: dict, gold: dict):
    """The first public attribute (``Class.attr``) where the model's instance differs, or None."""
    for name, g in gold.items():
        m = model[name]
        for attr, value in vars(g).items():
            if not attr.startswith("_") and getattr(m, attr, None) != value:
                return f"{name}.{attr}"
    return None


def missing(expected: list, got: list) -> list:
    """Items of ``expected`` not in ``got``, each item of ``got`` used once."""
    pool, out = list(got), []
    for item in expected:
        if item in pool:
            pool.remove(item)
        else:
            out.append(item)
    return out


def replay(classes: dict, initial_config: dict, model_turns: list, long_context: bool = False) -> list:
    """Per turn, the result of each of the model's calls, all run in order from the starting state: what a
    conversation shows the model after its calls (state lives across turns, so the whole history runs)."""
    model = start(classes, initial_config, long_context)
    table = methods(model)
    return [[execute(table, c) for c in turn] for turn in model_turns]


_JSON_TYPES = {"str": "string", "int": "integer", "float": "float", "bool": "boolean", "list": "array",
               "List": "array", "dict": "dict", "Dict": "dict", "tuple": "tuple", "Tuple": "tuple"}


def _type_name(annotation) -> str:
    if annotation is inspect.Parameter.empty:
        return "any"
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = text.replace("typing.", "").replace("Optional[", "").split("[")[0].strip("] ")
    return _JSON_TYPES.get(text, "any")


def describe(classes: dict) -> list:
    """The tools a conversation offers: each public method of the classes as ``{"name", "description",
    "parameters": {"type": "dict", "properties": {arg: {"type"}}, "required": [...]}}``, the description
    the docstring's first paragraph, types read from the annotations (``any`` where there is none)."""
    tools = []
    for obj in (cls() for cls in classes.values()):
        for name, method in inspect.getmembers(obj, predicate=inspect.ismethod):
            if name.startswith("_"):
                continue
            doc = (inspect.getdoc(method) or "").split("\n\n")[0].replace("\n", " ").strip()
            props, required = {}, []
            for p in inspect.signature(method).parameters.values():
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    continue
                props[p.name] = {"type": _type_name(p.annotation)}
                if p.default is inspect.Parameter.empty:
                    required.append(p.name)
            tools.append({"name": name, "description": doc,
                          "parameters": {"type": "dict", "properties": props, "required": required}})
    return tools


def check_turns(classes: dict, initial_config: dict, model_turns: list, gold_turns: list,
                long_context: bool = False) -> dict:
    """{"passed", "reason", "turn", "detail"}: ``model_turns`` holds per turn the model's
    ``(name, args, kwargs)`` calls (its steps within a turn flattened in order), ``gold_turns`` per turn
    the ground truth's call strings."""
    if len(model_turns) != len(gold_turns):
        return {"passed": False, "reason": "wrong_turn_count", "turn": None,
                "detail": f"{len(model_turns)} turns answered, {len(gold_turns)} asked"}
    model, gold = start(classes, initial_config, long_context), start(classes, initial_config, long_context)
    model_table, gold_table = methods(model), methods(gold)
    so_far = []
    for t, (mine, theirs) in enumerate(zip(model_turns, gold_turns)):
        results = [execute(model_table, c) for c in mine]
        so_far.extend(results)
        expected = [execute(gold_table, c) for c in theirs]
        if not theirs:
            continue
        if not mine:
            return {"passed": False, "reason": "empty_turn", "turn": t, "detail": "no call in this turn"}
        where = state_difference(model, gold)
        if where is not None:
            return {"passed": False, "reason": "state_mismatch", "turn": t, "detail": where}
        lost = missing(expected, so_far)
        if lost:
            return {"passed": False, "reason": "response_mismatch", "turn": t, "detail": lost[0][:200]}
    return {"passed": True, "reason": None, "turn": None, "detail": ""}
