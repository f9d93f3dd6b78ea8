"""``knowgic sweep``: several editors on one model, one results folder each, and one Markdown table."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, check_request, evaluate
from knowgic.evaluation.results import check_writable, load_results, write_atomic


def _cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_table(documents: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table: one row per run with the headline metrics, IFR by length and seconds per edit."""
    header = (
        "| editor | IFR ↓ | IFR n=1 | n=2 | n=3 | n=4 | n=5 | Pres. ↑ | Eff. ↑ | Gen. ↑ | Spec. ↑ "
        "| deep ↑ | active chains | s/edit |"
    )
    lines = [header, "|" + "---|" * 14]
    for doc in documents:
        m, c = doc["metrics"], doc["counts"]
        by_length = [_cell(m["ifr_by_length"][str(n)]["value"]) for n in range(1, 6)]
        seconds = doc["timing"]["edit_seconds"] / max(1, c["edits"])
        lines.append(
            "| "
            + " | ".join(
                [
                    doc["config"]["editor"],
                    _cell(m["ifr"]["value"]),
                    *by_length,
                    _cell(m["preservation"]["value"]),
                    _cell(m["efficacy"]["value"]),
                    _cell(m["generalization"]["value"]),
                    _cell(m["specificity"]["value"]),
                    _cell(m["deep_editing_score"]["value"]),
                    f"{c['active_chains']}/{c['chains']}",
                    f"{seconds:.2f}",
                ]
            )
            + " |"
        )
    first = documents[0] if documents else None
    if first is not None:
        cfg = first["config"]
        lines.append("")
        lines.append(
            f"Model `{cfg['model']}` ({cfg['dtype']}, {cfg['device']}), KnowGIC {first['dataset']['version']}, "
            f"protocol `{cfg['protocol']}`, mode `{cfg['mode']}`, seed {cfg['seed']}."
        )
    return "\n".join(lines) + "\n"


# What must agree for runs to share one table: the footnote states one setting for all rows.
_SHARED_SETTING = (
    ("model", lambda d: d["config"]["model"]),
    ("dataset version", lambda d: f"{d['dataset']['version']} ({d['dataset']['sha256'][:12]})"),
    ("protocol", lambda d: f"{d['config']['protocol']} {d['config']['protocol_params']}"),
    ("mode", lambda d: d["config"]["mode"]),
    ("limit", lambda d: d["config"]["limit"]),
    ("dtype", lambda d: d["config"]["dtype"]),
    ("device", lambda d: d["config"]["device"]),
    ("seed", lambda d: d["config"]["seed"]),
)


def results_paths(paths: Sequence[str | Path]) -> list[Path]:
    """The ``results.json`` files named by ``paths``: files, run folders, or sweep folders of run folders."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            direct = path / "results.json"
            inner = sorted(p / "results.json" for p in path.iterdir() if (p / "results.json").is_file())
            if direct.is_file():
                found.append(direct)
            elif inner:
                found.extend(inner)
            else:
                raise KnowgicError(f"{path} holds no results.json, neither directly nor in a sub-folder")
        elif path.exists():
            found.append(path)
        else:
            raise KnowgicError(f"{path} does not exist")
    return found


def summarize(paths: Sequence[str | Path]) -> str:
    """The :func:`summary_table` of runs written separately (e.g. one sweep split over processes).

    Every file is verified (schema and content hash); runs must share model, dataset version, protocol,
    mode, limit, dtype, device and seed, else the table's footnote (one setting for all rows) would be false.
    """
    files = results_paths(paths)
    if not files:
        raise KnowgicError("no results files given")
    documents = [load_results(path) for path in files]
    for label, key in _SHARED_SETTING:
        values = {key(d): path for d, path in zip(documents, files, strict=True)}
        if len(values) > 1:
            listed = "; ".join(f"{v} in {p}" for v, p in values.items())
            raise KnowgicError(f"runs differ in {label}, one table cannot compare them: {listed}")
    return summary_table(documents)


def run_sweep(
    model: str,
    editors: Sequence[str],
    out_dir: Path,
    protocol: str | None = None,
    mode: str | None = None,
    dataset_version: str | None = None,
    limit: int | None = None,
    dtype: str = "float32",
    device: str = "auto",
    progress: bool = True,
    stats_corpus: str | None = None,
    stats_samples: int | None = None,
    report: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """``stats_corpus``/``stats_samples`` go to the editors with key statistics (ROME, MEMIT, ...) only.

    ``report`` gets one line per finished editor (a sweep of a real model runs for hours), ``log`` one line
    per finished edit (see :func:`~knowgic.evaluation.evaluate.evaluate`).
    """
    from knowgic.editors.registry import resolve_editor
    from knowgic.models.loading import load_model

    if not editors:
        raise KnowgicError("no editors given")
    stats = {"stats_corpus": stats_corpus, "stats_samples": stats_samples}
    with_stats = {e for e in editors if resolve_editor(e).uses_key_statistics}
    if (stats_corpus is not None or stats_samples is not None) and not with_stats:
        raise KnowgicError(
            f"--stats-corpus/--stats-samples: none of the editors {', '.join(editors)} uses key statistics"
        )
    check_writable(out_dir)
    # Protocol and mode left as None take the spec's defaults (EvaluationRequest's field defaults).
    chosen = {k: v for k, v in (("protocol", protocol), ("mode", mode)) if v is not None}
    requests = [
        EvaluationRequest(
            model=model,
            editor=editor,
            **chosen,
            dataset_version=dataset_version,
            limit=limit,
            dtype=dtype,
            device=device,
            out_dir=out_dir / editor.replace(":", "_").replace("/", "_"),
            **(stats if editor in with_stats else {}),
        )
        for editor in editors
    ]
    for request in requests:  # every editor name is checked before anything runs
        check_request(request)
    loaded = load_model(model, dtype=dtype, device=device, progress=progress)
    documents = []
    start = time.perf_counter()
    for i, request in enumerate(requests, 1):
        document = evaluate(request, progress=progress, loaded=loaded, log=log).document
        documents.append(document)
        if report is not None:
            ifr, seconds = document["metrics"]["ifr"]["value"], document["timing"]["total_seconds"]
            report(
                f"[{i}/{len(requests)}] {request.editor}: IFR {'–' if ifr is None else f'{ifr:.3f}'}, "
                f"{seconds:.0f} s, {request.out_dir}"
            )
    table = summary_table(documents)
    table += f"\nSweep wall time: {time.perf_counter() - start:.0f} s.\n"
    write_atomic(out_dir / "summary.md", table.encode("utf-8"))
    return documents, table
