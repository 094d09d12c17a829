"""A user's own Hugging Face model folder -> a ``checkpoint`` artifact the pipeline starts from.

``import_model(SOURCE, store)`` reads a model folder (a local path or any fsspec URL: ``s3://…``,
``file://…``, ``memory://…``), checks that every stage can use it, and commits it as
``checkpoint/{name}`` (default ``base_ckpt``), the artifact ``compass run --from-artifact
base_ckpt=URI`` takes in place of the world's random init (docs/models.md).

Checks, each failing with one line (``ModelImportError``) that names the file or field:
config.json present and of a supported ``model_type``; safetensors weights (one file, or shards
listed by ``model.safetensors.index.json``, every shard present, the embedding as tall as
``vocab_size``); a tokenizer that loads, whose ids all fit below ``vocab_size``, with a chat
template (the pipeline renders every prompt with the model's own template, ``compass.lm.chat``)
that renders a user turn, and an eos token.

What is copied: the weights, config.json and the tokenizer files byte for byte (a bf16 model stays
bf16); README, ``*.bin`` and sub-folders are left out. generation_config.json keeps its token ids
only: its sampling defaults (``repetition_penalty``, ``top_k``, …) would leak into every transformers
``generate`` call the pipeline makes (``_write_generation_config``). One more thing may change: the
pad token. Every
generation path suppresses the pad id and strips it from completions, so a pad that is missing or
equal to eos (common: Llama 3 has none, Qwen base models pad with their eos) would stop the model
from ever ending an answer. Then the tokenizer is re-saved with a pad that is not eos: a reserved pad
token already in the vocabulary, else a new ``<|pad|>`` on a spare embedding row (real checkpoints
round ``vocab_size`` up, so the row exists; its weights are never read: pads are masked and
suppressed). ``compass.json`` records what was done.

The version is a fingerprint of the copied files' sha256s and this importer's code: importing the
same files again reuses the stored artifact.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compass.store.fingerprint import VERSION_LEN, digest, sha256_file

if TYPE_CHECKING:
    from compass.store.store import ArtifactStore

log = logging.getLogger("compass.import_model")

# model_type -> what users call it; the order is the one error lines print.
SUPPORTED = {"qwen3": "Qwen3", "qwen2": "Qwen2.5", "llama": "Llama", "qwen3_moe": "Qwen3-MoE"}
DEFAULT_NAME = "base_ckpt"
PRODUCER = "import-model"
STAGE = "import_model"

CONFIG_FILES = ("config.json", "generation_config.json")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
# Tokens model families reserve for padding, tried in this order before a new one is added.
RESERVED_PADS = ("<|finetune_right_pad_id|>", "<|pad|>", "<pad>", "[PAD]", "<|padding|>")
NEW_PAD = "<|pad|>"
# generation_config.json keys that are token ids or bookkeeping, kept; the rest are defaults the pipeline sets
GENERATION_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "_from_model_config",
                  "transformers_version", "use_cache")
# what transformers writes into every generation_config.json: not worth a line when left out
_GENERATION_NOISE = ("output_attentions", "output_hidden_states")
EMBED_TENSOR = "model.embed_tokens.weight"      # the input embedding's name in all SUPPORTED families
_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "I8": "int8", "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64",
           "BOOL": "bool"}


class ModelImportError(ValueError):
    """The folder cannot be the pipeline's base: one line naming the source and the file or field."""


@dataclass
class ModelImport:
    uri: str
    kind: str
    name: str
    version: str
    status: str                 # "imported" | "reused"
    source: str
    arch: str
    params: int
    dtype: str
    vocab_size: int
    tokenizer_size: int
    pad: dict = field(default_factory=dict)      # token, id, how ("own", "reserved", "added")
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    generation_dropped: dict = field(default_factory=dict)   # sampling defaults of generation_config.json
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def supported_line() -> str:
    return ", ".join(f"{k} ({v})" for k, v in SUPPORTED.items())


# -- reading the source ----------------------------------------------------------------------------

def _wanted(name: str) -> bool:
    return name in CONFIG_FILES or name in TOKENIZER_FILES or name == INDEX_FILE or name.endswith(".safetensors")


def _open_source(source: str, storage_options: dict | None):
    """(fs, path, uri, top-level file names) of the folder ``source`` names."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    from compass.credentials import fsspec_options
    try:
        fs, path = fsspec.core.url_to_fs(source, **fsspec_options(storage_options))
    except (ValueError, ImportError) as e:
        raise ModelImportError(f"{source}: cannot open: {e}") from None
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)
    if not fs.exists(path):
        hub = "://" not in source and source.count("/") == 1 and not source.startswith((".", "/"))
        hint = (f" (a Hugging Face Hub id? nothing is downloaded here: fetch it first, e.g. `hf download {source} "
                f"--local-dir DIR`, and import DIR)") if hub else ""
        raise ModelImportError(f"{source}: no such folder{hint}")
    if not fs.isdir(path):
        raise ModelImportError(f"{source}: not a folder (expected a Hugging Face model folder with config.json)")
    names = sorted(os.path.basename(e["name"].rstrip("/")) for e in fs.ls(path, detail=True)
                   if e.get("type") == "file")
    return fs, path, fs.unstrip_protocol(path), names


def _stage_locally(fs, path: str, names: list[str], tmp: Path) -> Path:
    """A local folder holding ``names``: the source itself when it is local, else a download."""
    from fsspec.implementations.local import LocalFileSystem
    if isinstance(fs, LocalFileSystem):
        return Path(path)
    fs.get([f"{path.rstrip('/')}/{n}" for n in names], [str(tmp / n) for n in names])
    return tmp


# -- checks -----------------------------------------------------------------------------------------

def _read_config(src: str, d: Path) -> dict:
    if not (d / "config.json").is_file():
        raise ModelImportError(f"{src}: no config.json: not a Hugging Face model folder")
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelImportError(f"{src}: config.json is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ModelImportError(f"{src}: config.json is not a JSON object")
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        raise ModelImportError(f"{src}: config.json model_type {mt!r} is not supported; supported: "
                               f"{supported_line()}")
    vs = cfg.get("vocab_size")
    if not isinstance(vs, int) or vs <= 0:
        raise ModelImportError(f"{src}: config.json has no vocab_size (got {vs!r})")
    return cfg


def _safetensors_header(src: str, f: Path) -> dict:
    """The tensor table of one safetensors file (name -> dtype, shape), read from its JSON header."""
    try:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100 << 20:
                raise ValueError(f"header of {n} bytes")
            header = json.loads(fh.read(n))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise ModelImportError(f"{src}: {f.name} is not a safetensors file ({e})") from None
    header.pop("__metadata__", None)
    return header


def _weights(src: str, d: Path, names: list[str], vocab_size: int,
             others_in_folder: list[str] = ()) -> tuple[list[str], int, str, dict]:
    """(weight files, parameter count, main dtype, parameters by dtype) after checking the files;
    ``others_in_folder``: the files not copied, to name a ``.bin`` when it is all there is."""
    if INDEX_FILE in names:
        try:
            weight_map = json.loads((d / INDEX_FILE).read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelImportError(f"{src}: {INDEX_FILE} has no readable weight_map ({e})") from None
        missing = [s for s in shards if s not in names]
        if missing:
            raise ModelImportError(f"{src}: {INDEX_FILE} names shard {missing[0]} which is not in the folder"
                                   + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        if not shards:
            raise ModelImportError(f"{src}: {INDEX_FILE} lists no shard")
        files = shards
    elif SINGLE_FILE in names:
        files = [SINGLE_FILE]
    else:
        others = [n for n in others_in_folder if n.endswith((".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack"))]
        found = f"; found {', '.join(others[:3])}: convert to safetensors first (save_pretrained)" if others else ""
        raise ModelImportError(f"{src}: no safetensors weights ({SINGLE_FILE}, or shards with {INDEX_FILE})"
                               f"{found}")
    by_dtype: dict[str, int] = {}
    embed_rows = None
    for f in files:
        for tname, t in _safetensors_header(src, d / f).items():
            n = math.prod(t["shape"])
            dt = _DTYPES.get(t["dtype"], t["dtype"].lower())
            by_dtype[dt] = by_dtype.get(dt, 0) + n
            if tname == EMBED_TENSOR:
                embed_rows = t["shape"][0]
    if embed_rows is not None and embed_rows != vocab_size:
        raise ModelImportError(f"{src}: {EMBED_TENSOR} has {embed_rows} rows but config.json vocab_size is "
                               f"{vocab_size}: the config does not describe these weights")
    params = sum(by_dtype.values())
    main = max(by_dtype, key=by_dtype.get) if by_dtype else "unknown"
    return files, params, main, by_dtype


def _load_tokenizer(src: str, d: Path, names: list[str]):
    if not ({"tokenizer.json", "tokenizer.model", "vocab.json"} & set(names)):
        raise ModelImportError(f"{src}: tokenizer does not load: no tokenizer file (tokenizer.json, "
                               f"tokenizer.model or vocab.json + merges.txt)")
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except Exception as e:  # noqa: BLE001  (any failure of a foreign tokenizer is the user's one line)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ModelImportError(f"{src}: tokenizer does not load: {type(e).__name__}: {first}") from None
    if isinstance(tok, bool) or not callable(getattr(tok, "apply_chat_template", None)):
        raise ModelImportError(f"{src}: tokenizer does not load: {type(tok).__name__} is not a tokenizer")
    return tok


def _max_token(tok) -> tuple[int, str]:
    vocab = tok.get_vocab()
    token = max(vocab, key=vocab.get)
    return vocab[token], token


def _check_tokenizer(src: str, tok, vocab_size: int) -> None:
    top, token = _max_token(tok)
    if top >= vocab_size:
        raise ModelImportError(f"{src}: tokenizer token {token!r} has id {top} but config.json vocab_size is "
                               f"{vocab_size}: the tokenizer does not belong to these weights")
    tmpl = tok.chat_template
    if isinstance(tmpl, dict):          # named templates: the pipeline uses the default one
        tmpl = tmpl.get("default")
    if not tmpl:
        raise ModelImportError(f"{src}: no chat template: tokenizer_config.json has no chat_template and there is "
                               f"no chat_template.jinja (the pipeline renders every prompt with the model's own "
                               f"template; docs/models.md)")
    if tok.eos_token_id is None:
        raise ModelImportError(f"{src}: no eos token: set eos_token in tokenizer_config.json (generation could "
                               f"never stop and SFT could not teach the model to)")
    from compass.lm.chat import chat_prefix
    try:
        text = chat_prefix(tok, "1+1=?")
    except Exception as e:  # noqa: BLE001  (a template is user code: any error is one line)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ModelImportError(f"{src}: the chat template does not render a user turn: {type(e).__name__}: "
                               f"{first}") from None
    if "1+1=?" not in text:
        raise ModelImportError(f"{src}: the chat template drops the user's message (rendered {text[:80]!r})")


def _choose_pad(src: str, tok, vocab_size: int) -> dict:
    """The pad the pipeline will use; adds a token to ``tok`` when none fits (see the module doc)."""
    eos = tok.eos_token_id
    if tok.pad_token_id is not None and tok.pad_token_id != eos:
        return {"token": tok.pad_token, "id": tok.pad_token_id, "how": "own"}
    vocab = tok.get_vocab()
    was = "none" if tok.pad_token_id is None else "the eos token"
    for name in RESERVED_PADS:
        if name in vocab and vocab[name] != eos:
            tok.pad_token = name
            return {"token": name, "id": vocab[name], "how": "reserved", "was": was}
    top, _ = _max_token(tok)
    if top + 1 >= vocab_size:
        raise ModelImportError(f"{src}: no pad token distinct from eos, none of {', '.join(RESERVED_PADS)} in the "
                               f"vocabulary and no spare embedding row to add one (vocab_size {vocab_size}); set "
                               f"pad_token in tokenizer_config.json")
    tok.add_special_tokens({"pad_token": NEW_PAD})
    if tok.pad_token_id is None or tok.pad_token_id >= vocab_size:
        raise ModelImportError(f"{src}: adding a pad token gave id {tok.pad_token_id}, outside vocab_size "
                               f"{vocab_size}; set pad_token in tokenizer_config.json")
    return {"token": NEW_PAD, "id": tok.pad_token_id, "how": "added", "was": was}


# -- the import -------------------------------------------------------------------------------------

def importer_code() -> str:
    """What decides the bytes an import writes beside the copied files: this module and the chat helper
    it renders with (the project code), and the packages that re-save a tokenizer. code_version takes
    packages; all of compass.lm would re-version every import on any SFT edit."""
    import importlib.metadata

    from compass.lm import chat
    parts = [Path(__file__).read_bytes(), Path(chat.__file__).read_bytes()]
    parts += [f"{d}=={importlib.metadata.version(d)}".encode() for d in ("transformers", "tokenizers")]
    return digest([p.hex() if isinstance(p, bytes) else p for p in parts])[:VERSION_LEN]


def import_version(file_sha: dict[str, str]) -> str:
    """Same files, same importer code -> same version (a changed pad rule must not reuse old imports)."""
    return digest({"stage": STAGE, "files": file_sha, "code": importer_code()})[:VERSION_LEN]


def import_model(source: str, store: ArtifactStore, name: str = DEFAULT_NAME,
                 storage_options: dict | None = None) -> ModelImport:
    """Check ``source`` and commit it as ``checkpoint/{name}`` in ``store`` (or reuse the stored version).

    ``storage_options``: fsspec options for the source (endpoint, region; credentials come from the
    environment, ``compass.credentials``)."""
    t0 = time.perf_counter()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise ModelImportError(f"import-model: artifact name {name!r} must be letters, digits, '_', '.', '-'")
    fs, path, uri, names = _open_source(source, storage_options)
    if "config.json" not in names:
        raise ModelImportError(f"{uri}: no config.json: not a Hugging Face model folder")
    keep = [n for n in names if _wanted(n)]
    skipped = [n for n in names if n not in keep and n != "compass.json"]
    with tempfile.TemporaryDirectory(prefix="compass-import-model-") as tmp:
        d = _stage_locally(fs, path, keep, Path(tmp))
        cfg = _read_config(uri, d)
        vocab_size = cfg["vocab_size"]
        weight_files, params, dtype, by_dtype = _weights(uri, d, keep, vocab_size, skipped)
        # shards the index does not name, and stray safetensors beside an index, are not the model
        keep = [n for n in keep if not n.endswith(".safetensors") or n in weight_files]
        tok = _load_tokenizer(uri, d, keep)
        _check_tokenizer(uri, tok, vocab_size)
        pad = _choose_pad(uri, tok, vocab_size)
        rewrite_tok = pad["how"] != "own"
        gen_dropped = _generation_defaults(d / "generation_config.json") if "generation_config.json" in keep else {}
        file_sha = {n: sha256_file(d / n) for n in keep}
        version = import_version(file_sha)
        meta = {"source": uri, "arch": cfg["model_type"], "architectures": cfg.get("architectures"),
                "params": params, "dtype": dtype, "params_by_dtype": by_dtype, "vocab_size": vocab_size,
                "tokenizer_size": len(tok), "pad": pad, "fingerprint": version, "files_sha256": file_sha,
                "chat_template": "own", "generation_config_dropped": gen_dropped, "imported_by": PRODUCER}
        result = dict(kind="checkpoint", name=name, version=version, source=uri, arch=cfg["model_type"],
                      params=params, dtype=dtype, vocab_size=vocab_size, tokenizer_size=len(tok), pad=pad,
                      files=keep, skipped=skipped, generation_dropped=gen_dropped)
        if store.exists("checkpoint", name, version):
            art = store.get("checkpoint", name, version)
            store.set_latest("checkpoint", name, version)
            log.debug("import-model %s: reusing stored version %s", name, version)
            return ModelImport(uri=art.uri, status="reused", wall_s=time.perf_counter() - t0, **result)
        w = store.begin("checkpoint", name, version, producer=PRODUCER, stage=STAGE,
                        config_fingerprint=digest({"source": uri})[:VERSION_LEN],
                        code_version=importer_code(), inputs=[])
        try:
            remote = d != Path(path)
            for n in keep:
                if (rewrite_tok and n in TOKENIZER_FILES) or n == "generation_config.json":
                    continue            # written below: the tokenizer with its new pad, the ids of generation_config
                # a download is moved, a user's local folder copied (never linked: they may edit it later)
                (shutil.move if remote else shutil.copyfile)(str(d / n), str(w.path(n)))
            if "generation_config.json" in keep:
                _write_generation_config(d / "generation_config.json", w.path("generation_config.json"), pad["id"])
            if rewrite_tok:
                tok.padding_side = "left"       # the pipeline pads prompts on the left (load_checkpoint)
                tok.save_pretrained(str(w.dir))
                _check_rewritten(uri, w.dir, tok)
            (w.dir / "compass.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
            w.extra.update({"source": uri, "arch": cfg["model_type"], "params": params, "dtype": dtype,
                            "vocab_size": vocab_size, "tokenizer_size": len(tok), "pad_token": pad["token"],
                            "pad_how": pad["how"], "fingerprint": version})
            art = w.commit()
        except BaseException:
            w.abort()
            raise
    store.set_latest("checkpoint", name, art.version)
    log.debug("import-model %s: committed %s (%s, %d parameters, %s)", name, art.uri, cfg["model_type"], params, dtype)
    return ModelImport(uri=art.uri, status="imported", wall_s=time.perf_counter() - t0, **result)


def _read_generation_config(src: Path) -> dict:
    try:
        gen = json.loads(src.read_text())
    except (ValueError, UnicodeDecodeError):
        return {}
    return gen if isinstance(gen, dict) else {}


def _generation_defaults(src: Path) -> dict:
    """The sampling defaults of a generation_config.json, which the import leaves out (see below)."""
    return {k: v for k, v in _read_generation_config(src).items()
            if k not in GENERATION_IDS and not (k in _GENERATION_NOISE and v is False)}


def _write_generation_config(src: Path, dst: Path, pad_id: int) -> None:
    """generation_config.json with its token ids only.

    transformers applies a checkpoint's generation defaults wherever a call does not name them, and the
    pipeline's calls name temperature, top-k/p, eos and pad but not e.g. ``repetition_penalty`` (Qwen2.5
    ships 1.05): the hf backend would then sample from another distribution than the log-probs RL records
    and than the native decoder's, and greedy evaluation would differ by backend. The pipeline's sampling
    is its config's."""
    keep = {k: v for k, v in _read_generation_config(src).items() if k in GENERATION_IDS}
    keep["pad_token_id"] = pad_id
    dst.write_text(json.dumps(keep, indent=2, sort_keys=True) + "\n")


def _check_rewritten(src: str, d: Path, tok) -> None:
    """The re-saved tokenizer loads back with the same ids, template, eos and the new pad."""
    from transformers import AutoTokenizer
    back = AutoTokenizer.from_pretrained(str(d))
    same = (back.get_vocab() == tok.get_vocab() and back.chat_template == tok.chat_template
            and back.eos_token_id == tok.eos_token_id and back.pad_token_id == tok.pad_token_id)
    if not same:
        raise ModelImportError(f"{src}: the tokenizer re-saved with its pad token does not load back the same "
                               f"(transformers {__import__('transformers').__version__}); set pad_token in "
                               f"tokenizer_config.json and import again")
