"""Second-moment statistics C = E[k kᵀ] of the keys at an MLP output projection, computed once and cached.

ROME (Meng et al. 2022, Eq. 2) and MEMIT (Meng et al. 2023, Eq. 14: C₀ = K₀K₀ᵀ up to scale) need the
uncentred second moment of the keys k, the inputs of the edited matrix W, over text the model has seen.
:func:`second_moment` averages k kᵀ over every non-special token of a corpus (special tokens such as a
prepended BOS are left out: their activations are outliers that no edit ever reads) and caches the result.

Cache: ``knowgic.paths.cache_dir() / "stats" / <model digest> / <layer>__<corpus>__n<count>__<dtype>``
as ``.safetensors`` with a ``.json`` metadata file beside it, keyed by (model id, model revision, layer,
corpus and its content hash, sample count, dtype). A file whose metadata does not match the key, whose sha256
does not match the metadata (truncated, overwritten), whose shape is not (d_in, d_in) or that holds non-finite
values is rebuilt, never used.

Corpora: ``knowgic`` (offline default) = the benchmark's own texts: every question and every cloze fact
(prompt filled with its subject, followed by its answer) of the chains and broader contexts, and every
rewrite prompt with its true target, deduplicated. They are read through
``knowgic.dataset.loading.load_cases()`` (the latest dataset version) when the package provides it, else
from the vendored upstream ``chains.json``; the metadata records which. The texts are arranged into
documents of ``TEXTS_PER_DOC`` sentences, one seeded shuffle after another, and ``sample_count`` documents
are used. Documents rather than lone sentences, because the keys ROME and MEMIT work with sit after random
prefixes (mid-text), and a C estimated only from text-initial positions leaves those directions nearly
unobserved: C⁻¹ then blows them up and C⁻¹k* stops matching the key of the bare prompt (measured on
knowgic-tiny: the share of δ delivered at the rewrite prompt, (C⁻¹k*)ᵀk_p / (C⁻¹k*)ᵀk*, rose from a median
of 0.28 to 0.75). Any other name is a ``datasets`` corpus, ``path[:config][@split]`` (e.g.
``wikitext:wikitext-103-raw-v1``), whose ``text`` field is read (needs network or a local ``datasets``
cache); there ``sample_count`` is the number of texts used at most.

Provided statistics: where the benchmark's texts are not readable (the runner's untrusted edit stage sees
no chain), ``$KNOWGIC_STATS_DIR`` names a read-only folder of statistics that trusted code computed with
:func:`second_moments` (``root=``) in the same layout; a file there is used when every field of its key but
the corpus hash matches (the trusted side vouches for the corpus it names), before the cache is consulted.

Model revision: ``load_model`` sets ``model.config._knowgic_revision`` (the loaded model's revision);
without it :func:`model_revision` falls back to :func:`model_fingerprint`, a hash of the config and a
strided sample of every parameter. Either way the model's dtype is part of the revision string. Model id
(:func:`model_identity`): the name or path the model was loaded by (``config._knowgic_model_id``, set by
``load_model``, else ``config._name_or_path``). It is part of the key because a declared revision need
not tell two models apart: a hub model whose commit could not be resolved has the revision ``unknown``
(or the branch asked for), whatever the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import sys
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from knowgic.editors.arch import get_module
from knowgic.editors.nethook import Trace, model_device, model_dtype
from knowgic.editors.repr_tools import encode, make_batch
from knowgic.errors import KnowgicError
from knowgic.paths import PACKAGE_DIR, PROVIDED_STATS_VARIABLE, cache_dir

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: model id in the key
DEFAULT_CORPUS = "knowgic"
DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_FINGERPRINT_SAMPLES = 256
TEXTS_PER_DOC = 6


# ---------------------------------------------------------------------------------------------- revision


def model_fingerprint(model: torch.nn.Module) -> str:
    """A cheap, stable sha256 of the model: its config plus, per parameter, name, shape, dtype and
    ``_FINGERPRINT_SAMPLES`` evenly strided values. Any retraining or edit of a parameter changes it with
    overwhelming probability; it is not a full content hash (that would read every weight)."""
    h = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        cfg = {k: v for k, v in config.to_dict().items() if not k.startswith("_")}
        h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, p in model.named_parameters():
            h.update(f"{name}|{tuple(p.shape)}|{p.dtype}".encode())
            flat = p.detach().reshape(-1)
            n = flat.numel()
            if n == 0:
                continue
            k = min(n, _FINGERPRINT_SAMPLES)
            # Integer strides: a float linspace rounds past the end for large tensors.
            idx = torch.arange(k, dtype=torch.int64, device=flat.device) * (n - 1) // max(k - 1, 1)
            h.update(flat[idx].to(torch.float64).cpu().numpy().tobytes())
    return "fp-" + h.hexdigest()


def model_identity(model: torch.nn.Module) -> str:
    """The model's name or path: ``config._knowgic_model_id`` (set by ``load_model``) or
    ``config._name_or_path`` (set by ``from_pretrained``); "" for a model built in memory (its fingerprint
    then identifies it)."""
    config = getattr(model, "config", None)
    for attr in ("_knowgic_model_id", "_name_or_path"):
        value = getattr(config, attr, None)
        if value:
            return str(value)
    return ""


def model_revision(model: torch.nn.Module) -> str:
    """``config._knowgic_revision`` (set by ``load_model``) or :func:`model_fingerprint`, plus the dtype."""
    declared = getattr(getattr(model, "config", None), "_knowgic_revision", None)
    base = str(declared) if declared else model_fingerprint(model)
    return f"{base}|{str(model_dtype(model)).removeprefix('torch.')}"


# ------------------------------------------------------------------------------------------------ corpora


@dataclass(frozen=True)
class Corpus:
    name: str
    texts: tuple[str, ...]
    source: str
    content_hash: str


def _hash_texts(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def _cases_texts(cases: Iterable[Any]) -> list[str]:
    texts: dict[str, None] = {}
    for case in cases:
        req = case.request
        texts[f"{req.rewrite_text} {req.target_true}"] = None
        for block in (case.chain, case.broader_context):
            for fact in block.facts:
                texts[f"{fact.cloze} {fact.answer}"] = None
                if fact.question:
                    texts[fact.question] = None
    return list(texts)


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.lstrip("v").split("."))


def _dataset_installed() -> bool:
    try:
        from knowgic.dataset.versions import dataset_installed  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return False
    return dataset_installed()


def knowgic_texts() -> tuple[list[str], str]:
    """The benchmark's own texts (see the module docstring) and where they were read from."""
    try:
        from knowgic.dataset.loading import load_cases  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        load_cases = None
    if load_cases is not None and _dataset_installed():
        try:
            cases = list(load_cases())  # the latest dataset version by default
        except TypeError:  # an API that needs the version named
            from knowgic.dataset.versions import available_versions  # type: ignore[import-not-found,unused-ignore]

            latest = max((str(v) for v in available_versions()), key=_semver)
            return _cases_texts(load_cases(latest)), f"knowgic.dataset.loading.load_cases({latest!r})"
        return _cases_texts(cases), "knowgic.dataset.loading.load_cases()"
    from knowgic.records import Case

    path = PACKAGE_DIR / "dataset" / "upstream" / "chains.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowgicError(
            "the benchmark's texts (corpus 'knowgic') are not readable here: no dataset is installed "
            f"(in the runner's edit stage, statistics come precomputed through ${PROVIDED_STATS_VARIABLE})"
        ) from None
    return _cases_texts(Case.from_row(r) for r in rows), "knowgic/dataset/upstream/chains.json"


def parse_datasets_corpus(corpus: str) -> tuple[str, str | None, str]:
    """``path[:config][@split]`` -> (path, config, split); split defaults to ``train``."""
    m = re.fullmatch(r"([^:@\s]+)(?::([^@\s]+))?(?:@(\S+))?", corpus)
    if not m:
        raise KnowgicError(
            f"stats corpus {corpus!r}: expected 'knowgic' or a datasets name 'path[:config][@split]', "
            "e.g. 'wikitext:wikitext-103-raw-v1'"
        )
    return m.group(1), m.group(2), m.group(3) or "train"


def check_corpus_name(corpus: str) -> None:
    """``knowgic`` or a well-formed ``datasets`` name (whether it exists is only known when it is read)."""
    if corpus != DEFAULT_CORPUS:
        parse_datasets_corpus(corpus)


def stats_overrides(corpus: str | None, sample_count: int | None) -> dict[str, Any]:
    """The hparams that ``--stats-corpus`` and ``--stats-samples`` set (``mom2_dataset``, ``mom2_n_samples``),
    checked; empty when neither is given."""
    out: dict[str, Any] = {}
    if corpus is not None:
        check_corpus_name(corpus)
        out["mom2_dataset"] = corpus
    if sample_count is not None:
        if isinstance(sample_count, bool) or not isinstance(sample_count, int) or sample_count < 1:
            raise KnowgicError(f"stats sample count must be a positive integer, got {sample_count!r}")
        out["mom2_n_samples"] = sample_count
    return out


def knowgic_documents(
    texts: Sequence[str], count: int, *, per_doc: int = TEXTS_PER_DOC, seed: int = 0
) -> list[str]:
    """``count`` documents of ``per_doc`` benchmark texts each: one seeded shuffle of all texts after another.

    Statements get a closing period so that the texts read as consecutive sentences.
    """
    rng = random.Random(seed)
    sentences = [t if t.endswith((".", "?", "!")) else t + "." for t in texts]
    docs: list[str] = []
    while len(docs) < count and sentences:
        order = list(sentences)
        rng.shuffle(order)
        for i in range(0, len(order), per_doc):
            docs.append(" ".join(order[i : i + per_doc]))
            if len(docs) == count:
                break
    return docs


def load_corpus(corpus: str, sample_count: int) -> Corpus:
    """``sample_count`` documents of ``corpus``: benchmark documents for ``knowgic``, else the first texts
    of a ``datasets`` corpus."""
    if sample_count < 1:
        raise KnowgicError(f"stats sample count must be >= 1, got {sample_count}")
    if corpus == DEFAULT_CORPUS:
        texts, source = knowgic_texts()
        docs = knowgic_documents(texts, sample_count)
        return Corpus(corpus, tuple(docs), f"{source}, {TEXTS_PER_DOC} texts per document", _hash_texts(docs))
    path, config, split = parse_datasets_corpus(corpus)
    try:
        import datasets

        ds = datasets.load_dataset(path, config, split=split, streaming=True)
        texts = []
        for row in ds:
            text = str(row.get("text", "")).strip()
            if text:
                texts.append(text)
            if len(texts) >= sample_count:
                break
    except Exception as exc:  # datasets raises many types (network, missing config, ...)
        raise KnowgicError(f"cannot read stats corpus {corpus!r} with datasets.load_dataset: {exc}") from None
    if not texts:
        raise KnowgicError(f"stats corpus {corpus!r} has no non-empty 'text' rows")
    # A hub corpus is identified by its name and split; hashing it here would mean reading it twice.
    return Corpus(corpus, tuple(texts), f"datasets:{path}:{config}@{split}", "")


# -------------------------------------------------------------------------------------------------- cache


@dataclass(frozen=True)
class StatsKey:
    """What a cached second moment was computed from; every field must match for the file to be used."""

    model_id: str
    model_revision: str
    layer: str
    corpus: str
    corpus_hash: str
    sample_count: int
    dtype: str
    shape: tuple[int, int]
    format: int = FORMAT_VERSION


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "x"


def stats_paths(key: StatsKey, root: Path | None = None) -> tuple[Path, Path]:
    """(tensor file, metadata file) for ``key`` under ``root`` (default: the cache's ``stats`` folder)."""
    digest = hashlib.sha256(f"{key.model_id}\x00{key.model_revision}".encode()).hexdigest()[:16]
    label = key.model_id.rstrip("/").split("/")[-1] or key.model_revision.split("|")[0]
    folder = (root if root is not None else cache_dir() / "stats") / f"{_slug(label)[:40]}-{digest}"
    stem = f"{_slug(key.layer)}__{_slug(key.corpus)}__n{key.sample_count}__{key.dtype}"
    return folder / f"{stem}.safetensors", folder / f"{stem}.json"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_cached(key: StatsKey, root: Path | None = None) -> tuple[torch.Tensor | None, str]:
    """The cached tensor for ``key``, or (None, why it cannot be used)."""
    tensor_path, meta_path = stats_paths(key, root)
    if not meta_path.is_file() or not tensor_path.is_file():
        return None, "not cached"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"unreadable metadata ({exc})"
    if not isinstance(meta, dict):
        return None, "metadata is not an object"
    expected = asdict(key)
    expected["shape"] = list(key.shape)
    for field_name, value in expected.items():
        if meta.get(field_name) != value:
            return None, f"metadata {field_name}={meta.get(field_name)!r} does not match {value!r}"
    try:
        if _sha256_file(tensor_path) != meta.get("tensor_sha256"):
            return None, "tensor file's sha256 does not match its metadata (truncated or replaced)"
        tensor = load_file(str(tensor_path))["mom2"]
    except Exception as exc:  # safetensors raises its own error types on corrupt headers
        return None, f"unreadable tensor file ({exc})"
    if tuple(tensor.shape) != key.shape:
        return None, f"tensor shape {tuple(tensor.shape)} != {key.shape}"
    if str(tensor.dtype).removeprefix("torch.") != key.dtype:
        return None, f"tensor dtype {tensor.dtype} != {key.dtype}"
    if not bool(torch.isfinite(tensor).all()):
        return None, "tensor has non-finite values"
    return tensor, "ok"


def _read_provided(key: StatsKey, root: Path) -> torch.Tensor | None:
    """The tensor of ``key`` in a provided folder, whatever the corpus hash its metadata records (the
    trusted side that wrote it read the corpus ``key.corpus`` names; this side may not be able to)."""
    _, meta_path = stats_paths(key, root)
    try:
        recorded = json.loads(meta_path.read_text(encoding="utf-8")).get("corpus_hash")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, str):
        return None
    tensor, _why = _read_cached(replace(key, corpus_hash=recorded), root)
    return tensor


def provided_stats_dir() -> Path | None:
    """``$KNOWGIC_STATS_DIR`` when it names a folder."""
    value = os.environ.get(PROVIDED_STATS_VARIABLE)
    return Path(value) if value and Path(value).is_dir() else None


def _write_cached(
    key: StatsKey, tensor: torch.Tensor, extra: dict[str, Any], root: Path | None = None
) -> None:
    tensor_path, meta_path = stats_paths(key, root)
    tensor_path.parent.mkdir(parents=True, exist_ok=True)
    # Tensor first, metadata last: the metadata (with the tensor's sha256) is the commit marker.
    tmp = tensor_path.with_suffix(f".tmp{os.getpid()}")
    save_file({"mom2": tensor.contiguous()}, str(tmp))
    os.replace(tmp, tensor_path)
    meta = asdict(key)
    meta["shape"] = list(key.shape)
    meta.update(extra)
    meta["tensor_sha256"] = _sha256_file(tensor_path)
    tmp_meta = meta_path.with_suffix(f".tmp{os.getpid()}")
    tmp_meta.write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp_meta, meta_path)


# ---------------------------------------------------------------------------------------------- statistics


def key_dim(model: torch.nn.Module, layer_name: str) -> int:
    """d_in of the projection ``layer_name`` (``nn.Linear.in_features``; GPT-2 Conv1D stores (d_in, d_out))."""
    module = get_module(model, layer_name)
    if isinstance(getattr(module, "in_features", None), int):
        return int(module.in_features)
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and weight is not None:
        return int(weight.shape[0])
    raise KnowgicError(f"module {layer_name!r} ({type(module).__name__}) is not a linear projection")


def _resolve_dtype(dtype: torch.dtype | str) -> tuple[torch.dtype, str]:
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else str(dtype)
    if name not in DTYPES:
        raise KnowgicError(f"stats dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name], name


def _context_length(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    for attr in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return min(value, 1024)
    return 1024


def collect_second_moments(
    model: torch.nn.Module,
    tokenizer: Any,
    layer_names: Sequence[str],
    texts: Sequence[str],
    *,
    batch_tokens: int = 4096,
    progress: bool = True,
) -> tuple[dict[str, torch.Tensor], int]:
    """({name: E[k kᵀ] in float64 on CPU}, number of tokens) over ``texts``, all layers in one pass;
    k = the input of each named projection, at every token that is not a special token."""
    names = list(dict.fromkeys(layer_names))
    device = model_device(model)
    max_len = _context_length(model)
    special = torch.tensor(sorted(set(getattr(tokenizer, "all_special_ids", []) or [])), dtype=torch.long)
    totals = {
        n: torch.zeros((key_dim(model, n), key_dim(model, n)), dtype=torch.float64, device=device)
        for n in names
    }
    count = 0
    seqs = [ids[:max_len] for ids in (encode(tokenizer, t) for t in texts) if ids]
    bar = tqdm(
        total=len(seqs),
        desc=f"second moment ({len(names)} layer{'s' if len(names) > 1 else ''})",
        unit="doc",
        disable=not progress or not sys.stderr.isatty(),
    )
    i = 0
    with torch.no_grad():
        while i < len(seqs):
            # Greedy batching by padded size.
            j, width = i, 0
            while j < len(seqs):
                grown = max(width, len(seqs[j]))
                if j > i and grown * (j - i + 1) > batch_tokens:
                    break
                width, j = grown, j + 1
            batch = make_batch(tokenizer, seqs[i:j])
            mask = batch.attention_mask.bool()
            if special.numel():
                mask &= ~torch.isin(batch.input_ids, special)
            batch = batch.to(device)
            mask = mask.to(device)
            with Trace(model, names, retain_input=True, retain_output=False, stop=True) as tr:
                model(**batch.model_inputs())
            for n in names:
                keys = tr[n].input
                assert keys is not None
                k = keys[mask].to(torch.float64)
                totals[n] += k.T @ k
            count += int(mask.sum())
            bar.update(j - i)
            i = j
    bar.close()
    if count == 0:
        raise KnowgicError(f"no tokens to estimate the second moment at {names}: the corpus is empty")
    return {n: (t / count).cpu() for n, t in totals.items()}, count


def collect_second_moment(
    model: torch.nn.Module,
    tokenizer: Any,
    layer_name: str,
    texts: Sequence[str],
    *,
    batch_tokens: int = 4096,
    progress: bool = True,
) -> tuple[torch.Tensor, int]:
    """(E[k kᵀ] in float64 on CPU, number of tokens) at one projection; see :func:`collect_second_moments`."""
    moments, count = collect_second_moments(
        model, tokenizer, [layer_name], texts, batch_tokens=batch_tokens, progress=progress
    )
    return moments[layer_name], count


def second_moments(
    model: torch.nn.Module,
    tokenizer: Any,
    layer_names: Sequence[str],
    *,
    model_id: str,
    model_revision: str,
    corpus: str = DEFAULT_CORPUS,
    sample_count: int,
    dtype: torch.dtype | str = torch.float32,
    batch_tokens: int = 4096,
    progress: bool = True,
    root: Path | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`second_moment` for several projections; the ones not cached are collected in one pass.

    ``root``: the folder that caches them (default: the cache's ``stats`` folder). Statistics provided
    through ``$KNOWGIC_STATS_DIR`` come first, and need no corpus."""
    torch_dtype, dtype_name = _resolve_dtype(dtype)
    names = list(dict.fromkeys(layer_names))
    provided = provided_stats_dir() if root is None else None
    if provided is not None:
        found: dict[str, torch.Tensor] = {}
        for name in names:
            d = key_dim(model, name)
            key = StatsKey(
                model_id=model_id,
                model_revision=model_revision,
                layer=name,
                corpus=corpus,
                corpus_hash="",
                sample_count=int(sample_count),
                dtype=dtype_name,
                shape=(d, d),
            )
            tensor = _read_provided(key, provided)
            if tensor is not None:
                found[name] = tensor
        if len(found) == len(names):
            return found
    data = load_corpus(corpus, sample_count)
    keys: dict[str, StatsKey] = {}
    out: dict[str, torch.Tensor] = {}
    for name in names:
        d = key_dim(model, name)
        keys[name] = StatsKey(
            model_id=model_id,
            model_revision=model_revision,
            layer=name,
            corpus=corpus,
            corpus_hash=data.content_hash,
            sample_count=int(sample_count),
            dtype=dtype_name,
            shape=(d, d),
        )
        cached, why = _read_cached(keys[name], root)
        if cached is not None:
            out[name] = cached
        elif why != "not cached":
            log.warning("rebuilding second-moment cache for %s: %s", name, why)
    missing = [n for n in keys if n not in out]
    if missing:
        started = time.perf_counter()
        moments, tokens = collect_second_moments(
            model, tokenizer, missing, data.texts, batch_tokens=batch_tokens, progress=progress
        )
        extra = {
            "corpus_source": data.source,
            "texts_used": len(data.texts),
            "tokens": tokens,
            "seconds": round(time.perf_counter() - started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        for name in missing:
            out[name] = moments[name].to(torch_dtype)
            _write_cached(keys[name], out[name], extra, root)
    return out


def second_moment(
    model: torch.nn.Module,
    tokenizer: Any,
    layer_name: str,
    *,
    model_id: str,
    model_revision: str,
    corpus: str = DEFAULT_CORPUS,
    sample_count: int,
    dtype: torch.dtype | str = torch.float32,
    batch_tokens: int = 4096,
    progress: bool = True,
) -> torch.Tensor:
    """C = E[k kᵀ] (d_in, d_in) at the input of module ``layer_name``, on CPU in ``dtype``; cached.

    ``model_id`` and ``model_revision`` identify the model and its weights (see :func:`model_identity` and
    :func:`model_revision`); ``corpus`` and
    ``sample_count`` choose the texts (module docstring). Accumulation is in float64; ``dtype`` is the
    stored precision and part of the key.
    """
    return second_moments(
        model,
        tokenizer,
        [layer_name],
        model_id=model_id,
        model_revision=model_revision,
        corpus=corpus,
        sample_count=sample_count,
        dtype=dtype,
        batch_tokens=batch_tokens,
        progress=progress,
    )[layer_name]


class SecondMoments:
    """An editor's memo of C per (model, layer, corpus, sample count, dtype), in front of the disk cache.

    The model's id and revision are taken once, the first time a model is seen, so the statistics stay those
    of the pristine model while a sequential run keeps editing it (as in the reference implementations,
    which compute C once). Models are held weakly; the memo is not edit state and survives ``Editor.reset()``.
    """

    def __init__(self) -> None:
        self._memo: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[Any, ...], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def get(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        layer_name: str,
        *,
        corpus: str,
        sample_count: int,
        dtype: str,
        batch_tokens: int = 4096,
        progress: bool = True,
        prefetch: Sequence[str] = (),
    ) -> torch.Tensor:
        """C (d_in, d_in) as float64 on the model's device. ``prefetch``: other projections whose C is
        needed soon (MEMIT's layers); missing ones are collected in the same pass."""
        memo = self._memo.setdefault(model, {})
        if ("revision",) not in memo:
            memo[("revision",)] = model_revision(model)
            memo[("model_id",)] = model_identity(model)
        names = [
            n for n in dict.fromkeys([layer_name, *prefetch]) if (n, corpus, sample_count, dtype) not in memo
        ]
        if names:
            moments = second_moments(
                model,
                tokenizer,
                names,
                model_id=memo[("model_id",)],
                model_revision=memo[("revision",)],
                corpus=corpus,
                sample_count=sample_count,
                dtype=dtype,
                batch_tokens=batch_tokens,
                progress=progress,
            )
            for n, c in moments.items():
                memo[(n, corpus, sample_count, dtype)] = c
        return memo[(layer_name, corpus, sample_count, dtype)].to(
            device=model_device(model), dtype=torch.float64
        )
