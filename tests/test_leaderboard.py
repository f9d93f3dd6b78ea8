"""The leaderboard, through its API (gradio_client against a launched app) and its pure parts.

The store holds real runs of ``evaluate`` on knowgic-tiny (three editors), one verified run whose
submission manifest carries markup (a script tag, a javascript: link), and bad files of every kind the
skipped panel must list.
"""

from __future__ import annotations

import html
import json
import math
import socket
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from knowgic.cli import main
from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from knowgic.results import content_sha256
from knowgic.runner.store.signing import load_signer
from knowgic.runner.store.store import ResultsStore, local_entry_id

EDITORS = ("none", "ice", "rome")
SCRIPT = "<script>alert('owned')</script>"
JS_LINK = "javascript:alert(1)"
UPLOAD_LIMIT = 512 * 1024


@dataclass
class LeaderboardFixture:
    root: Path
    store: ResultsStore
    runs: dict[str, Path]  # editor -> results.json written by evaluate
    entries: dict[str, str]  # editor (or "verified") -> entry id
    forged_entry: str
    spare_run: Path  # a real run not yet in the store (added by the tests that watch the refresh)
    archive: Path  # a valid submission archive (.tar.gz)


def write_submission(folder: Path, name: str = "scripted-editor") -> Path:
    """A valid submission whose free text carries markup that must never run."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_editor.py").write_text(
        "from knowgic.editors.base import Editor\n\n\nclass MyEditor(Editor):\n    pass\n", encoding="utf-8"
    )
    manifest = {
        "name": name,
        "version": "1.0.0",
        "authors": [f"{SCRIPT} Mallory"],
        "license": "MIT",
        "description": f"{SCRIPT} [click me]({JS_LINK}) <img src=x onerror=alert(2)>",
        "paper": "https://example.org/paper",
        "editor": "my_editor:MyEditor",
        "hparams": {"knowgic-tiny": {"layers": [0]}},
        "models": ["knowgic-tiny"],
        "protocols": ["logprob"],
    }
    (folder / "submission.yaml").write_text(json.dumps(manifest), encoding="utf-8")  # JSON is YAML
    archive = folder.parent / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return archive


def build_leaderboard_store(root: Path, knowgic_tiny: Any, limit: int | None = 2) -> LeaderboardFixture:
    """Fill a store with real runs (on the first ``limit`` edits; None: all of them), one verified run with a
    hostile manifest, and bad files."""
    runs = {}
    for editor in EDITORS:
        request = EvaluationRequest(
            model="knowgic-tiny", editor=editor, limit=limit, out_dir=root / "runs" / editor
        )
        runs[editor] = evaluate(request, progress=False, loaded=knowgic_tiny).results_path
    spare = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1, out_dir=root / "runs" / "spare"),
        progress=False,
        loaded=knowgic_tiny,
    ).results_path
    store = ResultsStore(root / "store", verified_cache=root / "cache")
    entries = {editor: store.add_local(path, label=f"{editor} run").entry_id for editor, path in runs.items()}

    archive = write_submission(root / "submission")
    hostile_manifest = json.loads((root / "submission" / "submission.yaml").read_text(encoding="utf-8"))
    hostile_manifest["paper"] = JS_LINK  # a forged entry could carry anything: it must never become a link
    job = {"job_id": "job-scripted-1", "model": "knowgic-tiny", "state": "finished"}
    # The verified run re-uses the ICE run's results: the store records it as a second, verified entry.
    entries["verified"] = store.add_verified(
        runs["ice"], archive_path=archive, manifest=hostile_manifest, job=job, signer=load_signer()
    ).entry_id

    # Bad files, each of which the skipped panel must list with its reason.
    store.entries_dir.joinpath("broken.json").write_text("{not json", encoding="utf-8")
    forged = json.loads(runs["rome"].read_text(encoding="utf-8"))
    forged["metrics"]["ifr"]["value"] = 0.0  # a better IFR than the run had, hash left as it was
    fake_sha = content_sha256({**forged, "config": {**forged["config"], "seed": 99}})
    forged["sha256"] = fake_sha
    store.results_path(fake_sha).write_text(json.dumps(forged), encoding="utf-8")
    forged_entry = local_entry_id(fake_sha)
    record = json.loads(store.entry_path(entries["rome"]).read_text(encoding="utf-8"))
    record.update(entry_id=forged_entry, results_sha256=fake_sha)
    store.entry_path(forged_entry).write_text(json.dumps(record), encoding="utf-8")
    dangling = dict(record, entry_id="local-dangling", results_sha256="0" * 64)
    store.entry_path("local-dangling").write_text(json.dumps(dangling), encoding="utf-8")
    store.entries_dir.joinpath("unreadable.json").mkdir()
    return LeaderboardFixture(root, store, runs, entries, forged_entry, spare, archive)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def board_store(knowgic_tiny, tmp_path_factory) -> LeaderboardFixture:
    return build_leaderboard_store(tmp_path_factory.mktemp("leaderboard"), knowgic_tiny)


@pytest.fixture(scope="module")
def served(board_store):
    """The app launched on a free port, and a gradio_client connected to it."""
    from gradio_client import Client

    from knowgic.leaderboard.app import build_app, launch_app

    app = build_app(
        board_store.store.root,
        upload_limit_bytes=UPLOAD_LIMIT,
        refresh_seconds=1.0,
        verified_cache=board_store.root / "cache",
    )
    port = free_port()
    launch_app(app, host="127.0.0.1", port=port, block=False, quiet=True)
    wait_verified(app)
    try:
        yield app, Client(f"http://127.0.0.1:{port}/", verbose=False)
    finally:
        app.close()


def wait_verified(app: Any, timeout: float = 120.0) -> None:
    """Until the app's background verification of the store is done (the page answers before that)."""
    deadline = time.monotonic() + timeout
    while app.leaderboard_state.progress is not None:
        assert time.monotonic() < deadline, "background verification did not finish"
        time.sleep(0.05)


ALL_COLUMNS = [
    "model",
    "editor",
    "protocol",
    "mode",
    "dataset",
    "source",
    "ifr",
    "ifr_per_edit",
    "preservation",
    "preservation_macro",
    "efficacy",
    "generalization",
    "specificity",
    "deep_editing_score",
    "active_chains",
    "links",
    "row_id",
]


def controls(
    model="knowgic-tiny",
    search="",
    editors=(),
    sources=(),
    sort="deep_editing_score",
    order="descending",
    columns=None,
) -> list[Any]:
    """The Leaderboard tab's controls, as the /table, /csv, /reload and /plots endpoints take them:
    model, search, the filters (editor, protocol, mode, dataset, source), sort, order, columns."""
    return [model, search, list(editors), [], [], [], list(sources), sort, order, columns or ALL_COLUMNS]


def _frame(value: Any) -> dict[str, Any]:
    return value.get("value", value)


def table(client, model="knowgic-tiny", page=1, **kwargs):
    """Headers, rows and status of the ranking; ``reported`` rows come back apart (``reported_table``)."""
    result = client.predict(*controls(model, **kwargs), page, api_name="/table")
    frame = _frame(result[0])
    return frame["headers"], frame["data"], result[1]


def reported_table(client, model, **kwargs):
    result = client.predict(*controls(model, **kwargs), 1, api_name="/table")
    frame = _frame(result[3])
    return frame["headers"], frame["data"]


def _doc(board_store, editor) -> dict[str, Any]:
    return json.loads(board_store.runs[editor].read_text(encoding="utf-8"))


def _column(headers, rows, name) -> list[Any]:
    i = headers.index(name)
    return [r[i] for r in rows]


def _ids(headers, rows) -> list[str]:
    """Row ids, from the editor cell's link to the run's page."""
    return [cell.split("?result=")[1].split('"')[0] for cell in _column(headers, rows, "Editor")]


# -- pure parts -----------------------------------------------------------------------------------------
def test_pareto_front_keeps_points_no_other_point_beats() -> None:
    from knowgic.leaderboard.plots import pareto_front

    points = [(0.5, 0.9), (0.3, 0.8), (0.6, 0.95), (0.4, 0.7), (0.3, 0.6), (0.7, 0.9)]
    assert pareto_front(points) == [(0.3, 0.8), (0.5, 0.9), (0.6, 0.95)]
    assert pareto_front([]) == []


def test_columns_are_keyed_by_metric_path_and_read_from_the_spec_on_first_use() -> None:
    import subprocess
    import sys

    from knowgic.leaderboard.columns import leaderboard_columns
    from knowgic.spec import benchmark_spec

    code = (
        "import knowgic.spec as s, knowgic.leaderboard.app, knowgic.leaderboard.table, knowgic.leaderboard.views, "
        "knowgic.leaderboard.plots, knowgic.leaderboard.about, knowgic.leaderboard.ranking; "
        "print(s.benchmark_spec.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"  # importing the leaderboard does not read the spec

    spec = benchmark_spec()
    columns = leaderboard_columns(spec)
    headline = [name for name, m in spec.metrics.items() if m.headline]
    shown = [c.path for c in columns.metrics]
    assert [p for p in shown if p in headline] == headline  # and each paper's figure's ranked form after it
    assert shown[shown.index("preservation") + 1] == "preservation_macro" and columns["preservation"].paper
    by_length = spec.metrics["ifr_by_length"]
    assert [c.path for c in columns.parts] == [f"ifr_by_length.{part}" for part in by_length.parts]
    score = spec.metrics["deep_editing_score"]
    assert columns.rank.metric is score
    from knowgic.measure.ranks import with_paper_forms

    assert [c.path for c in columns.default] == [p for p, _ in with_paper_forms(spec, score.of)] + [
        "deep_editing_score"
    ]
    assert {"ifr", "ifr_per_edit"} <= {c.path for c in columns.default}  # the paper's and the ranked form
    part = columns["ifr_by_length.2"]
    assert part.metric is by_length and part.label == "IFR n=2 (paper)" and part.lower_is_better
    assert (
        columns["preservation"].label == "Preservation (paper)"
        and columns["preservation"].direction == "higher"
    )
    assert columns["preservation_macro"].label == "Preservation (macro)"
    # RippleEdits' criteria: optional columns, one per form and criterion, never in the default view.
    ripple = [c.path for c in columns.group("ripple")]
    assert ripple == [
        f"{name}.{part}"
        for name in ("ripple_accuracy", "ripple_probability")
        for part in spec.metrics[name].parts
    ]
    assert [c.path for c in columns.optional] == ripple and set(ripple) <= {c.path for c in columns.table}
    assert columns["ripple_accuracy.LG"].label == "Ripple acc. LG"
    from knowgic.leaderboard.table import column_headers, default_columns

    assert not set(ripple) & set(default_columns(columns)) and set(ripple) <= set(column_headers(columns))
    assert [c.label for c in columns.per_edit][:2] == [
        "IFR",
        "IFR (per edit)",
    ]  # one edit's IFR: no paper mark


def test_only_http_links_are_kept() -> None:
    from knowgic.leaderboard.table import links_html, safe_url

    assert safe_url("https://arxiv.org/abs/2202.05262") == "https://arxiv.org/abs/2202.05262"
    for bad in (
        JS_LINK,
        "JAVASCRIPT:alert(1)",
        "data:text/html,x",
        'https://x.org/"onmouseover=alert(1)',
        None,
        3,
    ):
        assert safe_url(bad) is None
    assert links_html(JS_LINK, "vbscript:x") == "–"


def test_reported_rows_are_the_authors_ifr_and_preservation_only() -> None:
    from knowgic.leaderboard.columns import leaderboard_columns
    from knowgic.leaderboard.table import reported_rows

    columns = leaderboard_columns()
    rows = reported_rows(columns)
    assert len(rows) == 15 and {r.model for r in rows} == {"GPT2-XL", "Llama-3-8B", "Qwen2.5-7B"}
    gpt2_rome = next(r for r in rows if r.model == "GPT2-XL" and r.editor == "rome")
    assert gpt2_rome.metrics["ifr"].value == pytest.approx(0.279)
    assert gpt2_rome.metrics["preservation"].value == pytest.approx(0.7521367521367521)
    assert gpt2_rome.metrics["ifr_by_length.2"].value is not None  # the parts are keyed by metric path
    for column in columns.metrics:
        if column.path not in ("ifr", "preservation"):
            cell = gpt2_rome.metrics[column.path]
            assert cell.value is None and "not reported" in cell.reason
            assert 'title="not reported' in cell.html(None) and ">–<" in cell.html(None)


def test_cli_refuses_a_missing_store(tmp_path, capsys) -> None:
    assert main(["leaderboard", "--store", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nowhere" in err and "does not exist" in err


# -- the launched app ----------------------------------------------------------------------------------
def test_the_ranking_is_one_models_runs_with_rank_ranges_in_value_order(served, board_store) -> None:
    from knowgic.measure.ranks import rank_runs

    _, client = served
    headers, rows, status = table(client)
    status = html.unescape(status)  # the status line is escaped HTML: read as the page shows it
    ids = _ids(headers, rows)
    assert sorted(ids) == sorted(board_store.entries.values())  # every stored run, no reported row
    assert board_store.forged_entry not in ids and "local-dangling" not in ids
    assert status.startswith("4 result(s) of knowgic-tiny")
    # One model, protocol, mode and dataset: those columns are hidden and said once in the status, which
    # names the ranking's edit set.
    assert headers[:2] == ["Rank", "Editor"] and not {"Model", "Protocol", "Mode", "Dataset"} & set(headers)
    assert "logprob" in status and "independent" in status and "dataset 1.1.0" in status
    assert "ranking on knowgic 1.1.0 (sha256" in status and "the first 2 edits (--limit 2)" in status
    # The first screen shows the paper's pooled figures beside the per-edit forms that rank.
    first = headers.index("IFR (paper)")
    assert headers[first : first + 4] == [
        "IFR (paper)",
        "IFR (per edit)",
        "Preservation (paper)",
        "Preservation (macro)",
    ]
    # Rank: each run's 95% range on the deep-editing score among the runs of its ranking (knowgic.measure.ranks).
    docs = {e: _doc(board_store, "ice" if e == "verified" else e) for e in board_store.entries}
    names = list(docs)
    ranking = rank_runs([docs[e] for e in names], ["deep_editing_score"])["deep_editing_score"]
    expected = {board_store.entries[e]: ranking.ranges[k].text for k, e in enumerate(names)}
    shown = {
        i: r.split(">")[1].split("<")[0] for i, r in zip(ids, _column(headers, rows, "Rank"), strict=True)
    }
    assert shown == expected
    # Rows in the order of the score, best first.
    scores = [
        docs[names[[board_store.entries[e] for e in names].index(i)]]["metrics"]["deep_editing_score"][
            "value"
        ]
        for i in ids
    ]
    assert scores == sorted(scores, reverse=True)
    # A metric cell: value and interval from results.json (n on hover).
    rome = _doc(board_store, "rome")["metrics"]["ifr"]
    cell = rows[ids.index(board_store.entries["rome"])][headers.index("IFR (paper)")]
    assert f"{rome['value']:.3f}" in cell and f"n = {rome['n']}" in cell  # n on hover
    assert f"[{rome['interval'][0]:.2f}, {rome['interval'][1]:.2f}]" in cell


def test_a_limit_run_is_not_in_the_full_runs_ranking(knowgic_tiny, tmp_path) -> None:
    """Full runs are the default ranking; a --limit run is a ranking of its own, never ranked with them."""
    from knowgic.leaderboard.table import Board, TableQuery, ranking_choice

    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    runs = {
        name: evaluate(
            EvaluationRequest(model="knowgic-tiny", editor="none", limit=limit, out_dir=tmp_path / name),
            progress=False,
            loaded=knowgic_tiny,
        ).results_path
        for name, limit in (("full", None), ("limit", 2))
    }
    entries = {name: store.add_local(path, label=name).entry_id for name, path in runs.items()}
    board = Board(store.scan(), include_reported=False)
    (full, n_full), (part, n_part) = board.rankings("knowgic-tiny")
    assert full.full and not part.full and n_full == n_part == 1 and "all 26 edits" in full.label
    shown = board.page(TableQuery(model="knowgic-tiny", part="ranked"))
    assert shown.row_ids == [entries["full"]] and shown.ranking == full  # the default view: full runs
    other = board.page(TableQuery(model=ranking_choice("knowgic-tiny", part), part="ranked"))
    assert other.row_ids == [entries["limit"]] and other.ranking == part
    assert board.ranks(full).keys() == {entries["full"]}
    # Every model's runs (no ranks) still lists both.
    assert set(board.page(TableQuery(model=None, part="ranked")).row_ids) == set(entries.values())


def test_reported_rows_come_apart_and_undefined_is_never_zero(served) -> None:
    _, client = served
    headers, rows, status = table(client, model="GPT2-XL")
    assert rows == [] and status.startswith("0 result(s) of GPT2-XL")
    headers, rows = reported_table(client, "GPT2-XL")
    assert "Rank" not in headers and len(rows) == 5
    rome = next(r for r in rows if ">rome<" in r[headers.index("Editor")])
    assert 'class="kg-undefined"' in rome[headers.index("Efficacy")]
    assert "0.000" not in rome[headers.index("Efficacy")]


def test_filter_search_sort_and_columns(served, board_store) -> None:
    from knowgic.leaderboard.table import ALL_MODELS

    _, client = served
    headers, rows, status = table(client, editors=["rome"])
    assert set(_column(headers, rows, "Editor")) == {
        '<a href="?result=' + board_store.entries["rome"] + '" class="kg-editor" title="rome run">rome</a>'
    }
    assert status.startswith("1 result(s)")
    headers, rows, _ = table(client, sources=["local"], sort="ifr", order="ascending")
    ifrs = {board_store.entries[e]: _doc(board_store, e)["metrics"]["ifr"]["value"] for e in EDITORS}
    assert _ids(headers, rows) == sorted(ifrs, key=ifrs.get)
    headers, _rows = reported_table(client, ALL_MODELS, search="llama-3 AlphaEdit")
    assert _ids(headers, _rows) == ["reported-llama-3-8b-alphaedit"]
    headers, rows, _ = table(client, columns=["model", "editor", "ifr_by_length.3", "row_id"])
    assert headers == ["Rank", "Editor", "IFR n=3 (paper)", "Id"]  # the model column holds one value: hidden
    headers, rows, _ = table(client, columns=["editor", "ripple_accuracy.RS", "ripple_probability.SA"])
    assert headers == ["Rank", "Editor", "Ripple acc. RS", "Ripple p SA"]
    from knowgic.formatting import format_number

    rome = [
        c
        for e, c in zip(
            _column(headers, rows, "Editor"), _column(headers, rows, "Ripple acc. RS"), strict=True
        )
        if ">rome<" in e
    ]
    value = _doc(board_store, "rome")["metrics"]["ripple_accuracy"]["RS"]["value"]
    assert len(rome) == 1 and (value is None or f">{format_number(value, 3)}<" in rome[0])
    headers, rows, _ = table(client, model=ALL_MODELS, columns=["model", "editor", "ifr"])
    assert headers == ["Editor", "IFR (paper)"]  # every stored run is of knowgic-tiny; no ranks across models


def test_pages_cover_every_row_once(board_store) -> None:
    from knowgic.leaderboard.table import Board, TableQuery

    board = Board(board_store.store.scan())
    pages = [board.page(TableQuery(page=n, page_size=4)) for n in range(1, 7)]
    assert [p.pages for p in pages] == [5] * 6 and pages[-1].page == 5  # past the end: the last page
    seen = [i for p in pages[:5] for i in p.row_ids]
    assert len(seen) == len(set(seen)) == pages[0].total == 19


def test_csv_has_the_filtered_rows_with_every_number(served, board_store) -> None:
    _, client = served
    path = client.predict(
        *controls(editors=["rome", "ice"], sources=["local"], sort="ifr", order="ascending"), api_name="/csv"
    )
    frame = pd.read_csv(path["value"] if isinstance(path, dict) else path)
    assert frame["row_id"].tolist()[0] in {board_store.entries["ice"], board_store.entries["rome"]}
    assert set(frame["editor"]) == {"rome", "ice"} and len(frame) == 2
    rome = frame[frame["editor"] == "rome"].iloc[0]
    doc = _doc(board_store, "rome")["metrics"]
    assert rome["ifr"] == pytest.approx(doc["ifr"]["value"]) and rome["ifr_n"] == doc["ifr"]["n"]
    assert rome["ifr_low"] == pytest.approx(doc["ifr"]["interval"][0])
    assert rome["ifr_by_length.1"] == pytest.approx(doc["ifr_by_length"]["1"]["value"])
    assert rome["ifr_by_length.1_n"] == doc["ifr_by_length"]["1"]["n"]


def test_detail_view_of_a_run(served, board_store) -> None:
    _, client = served
    entry = board_store.entries["rome"]
    doc = _doc(board_store, "rome")
    header, metrics, ripple, heatmap, per_edit, _edits, chains, config, provenance, environment, download = (
        client.predict(entry, api_name="/detail")
    )
    assert "knowgic-tiny · rome" in header and f"?result={entry}" in header
    metric_rows = {r[0]: r for r in metrics["data"]}
    assert metric_rows["IFR (paper)"][1] == f"{doc['metrics']['ifr']['value']:.4f}"
    assert metric_rows["IFR (per edit)"][1] == f"{doc['metrics']['ifr_per_edit']['value']:.4f}"
    assert metric_rows["IFR n=1 (paper)"][2] == doc["metrics"]["ifr_by_length"]["1"]["n"]
    assert len(per_edit["data"]) == len(doc["per_edit"])
    first = doc["per_edit"][0]["edit_id"]
    expected = [c for c in doc["chains"] if c["edit_id"] == first]
    assert [r[0] for r in chains["data"]] == [c["case_id"] for c in expected]
    assert chains["data"][0][3] == pytest.approx(round(expected[0]["r_pre"], 4))
    assert chains["data"][0][4] == pytest.approx(round(expected[0]["r_post"], 4))
    assert config["hparams_sha256"] == doc["config"]["hparams_sha256"] and config["hparams"]
    assert provenance["results_sha256"] == doc["sha256"] and provenance["dataset"] == doc["dataset"]
    assert environment == doc["environment"]
    assert [Path(f).read_bytes() for f in download] == [board_store.runs["rome"].read_bytes()]
    assert json.loads(heatmap["plot"])["data"][0]["type"] == "heatmap"
    # RippleEdits' six criteria, one line each: the tests kept and dropped, both forms with n.
    from knowgic.leaderboard.columns import leaderboard_columns
    from knowgic.ripple.queries import CRITERIA

    assert ripple["visible"] is True
    ripple = ripple["value"]
    assert [r[0] for r in ripple["data"]] == [f"{name} ({c})" for c, name in CRITERIA.items()]
    counts = doc["counts"]["ripple"]
    for row, criterion in zip(ripple["data"], CRITERIA, strict=True):
        line = dict(zip(ripple["headers"], row, strict=True))
        assert line["Tests"] == f"{counts[criterion]['kept']} of {counts[criterion]['queries']}"
        assert line["Dropped"] == counts[criterion]["dropped_by_conditions"]
        for name in ("ripple_accuracy", "ripple_probability"):
            figure = doc["metrics"][name][criterion]
            label = leaderboard_columns()[f"{name}.{criterion}"].metric.label
            shown = "–" if figure["value"] is None else f"{figure['value']:.4f}"
            assert line[label] == shown and line[f"{label}: n"] == figure["n"]
    assert any(counts[c]["kept"] for c in CRITERIA)  # the two edits have tests that count
    second = doc["per_edit"][1]["edit_id"]
    chains2 = client.predict(entry, second, api_name="/chains")
    assert [r[0] for r in chains2["data"]] == [c["case_id"] for c in doc["chains"] if c["edit_id"] == second]


def test_submitter_text_is_shown_as_text_never_markup(served, board_store) -> None:
    _, client = served
    entry = board_store.entries["verified"]
    header, *_rest, provenance, _env, download = client.predict(entry, api_name="/detail")
    archive = board_store.store.submission_path(provenance["store_entry"]["submission_sha256"])
    assert Path(download[1]).read_bytes() == archive.read_bytes()  # the run's code
    assert "<script" not in header and "&lt;script&gt;" in header
    assert "<img" not in header and "&lt;img" in header
    assert 'href="javascript' not in header.lower() and JS_LINK in header  # shown, as text only
    assert provenance["store_entry"]["manifest"]["paper"] == JS_LINK  # the JSON viewer shows it as text
    headers, rows, _ = table(client, search="job-scripted")
    assert len(rows) == 1
    links = rows[0][headers.index("Paper / code")]
    assert "javascript" not in links.lower()
    # The reported rows and plots escape names too (plotly reads a few tags in its texts).
    from knowgic.leaderboard.plots import tradeoff_figure
    from knowgic.leaderboard.table import Board, TableQuery

    board = Board(board_store.store.scan())
    frame = board.select(TableQuery())
    frame.loc[frame.index[0], "editor"] = SCRIPT
    figure = tradeoff_figure(frame, frame.iloc[0]["model"])
    assert "<script" not in json.dumps(figure.to_plotly_json())


def test_detail_of_a_reported_row_and_an_unknown_id(served) -> None:
    _, client = served
    header, metrics, *_ = client.predict("reported-qwen2-5-7b-alphaedit", api_name="/detail")
    assert "Qwen2.5-7B · alphaedit" in header and "IFR and Preservation only" in header
    values = {r[0]: r[1] for r in metrics["data"]}
    assert values["IFR (paper)"] == "0.3910" and values["Efficacy"] == "–"
    header, *_ = client.predict("no-such-run", api_name="/detail")
    assert "No result with id" in header


def test_compare_two_runs_of_one_model(served, board_store) -> None:
    from knowgic.measure.compare import compare_results

    _, client = served
    a, b = board_store.entries["none"], board_store.entries["rome"]
    message, metrics, edits = client.predict(a, b, api_name="/compare")
    assert "paired" in message
    expected = {d.metric: d for d in compare_results(_doc(board_store, "none"), _doc(board_store, "rome"))}
    rows = {r[0]: r for r in metrics["data"]}
    ifr = expected["ifr"]
    assert rows["IFR (paper)"][1] == "lower ↓" and rows["IFR (paper)"][6] == f"{ifr.difference:+.4f}"
    assert rows["IFR (paper)"][7] == f"[{ifr.low:+.4f}, {ifr.high:+.4f}]"
    score = expected["deep_editing_score"]
    if score.told_apart:
        assert rows["Deep-editing score"][8] == f"{score.better} better (told apart)"
        assert f"{score.better} is better" in message
    else:
        assert rows["Deep-editing score"][8] == "not told apart"
    assert f'href="?a={a}&amp;b={b}"' in message  # the permalink is a link
    assert len(edits["data"]) == len(_doc(board_store, "rome")["per_edit"])
    message, metrics, _ = client.predict(a, "reported-gpt2-xl-rome", api_name="/compare")
    assert "different models" in message and metrics["data"] == []


def test_skipped_panel_lists_every_bad_file_with_its_reason(served, board_store) -> None:
    _app, client = served
    result = client.predict(*controls(), 1, api_name="/reload")
    skipped = next(r for r in result if isinstance(r, dict) and r.get("headers") == ["File", "Reason"])
    reasons = {row[0]: row[1] for row in skipped["data"]}
    assert "not valid JSON" in reasons["entries/broken.json"]
    assert "does not match its content" in reasons[f"entries/{board_store.forged_entry}.json"]
    assert "missing" in reasons["entries/local-dangling.json"]
    assert "cannot read" in reasons["entries/unreadable.json"]


def test_submit_validates_queues_and_the_queue_view_shows_the_job(served, board_store, tmp_path) -> None:
    from gradio_client import handle_file

    _, client = served
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"this is not a gzip file")
    message = client.predict(handle_file(str(bad)), api_name="/submit")
    assert message.startswith("error:") and "\n" not in message
    invalid = write_submission(tmp_path / "invalid", name="Bad Name")
    message = client.predict(handle_file(str(invalid)), api_name="/submit")
    assert message.startswith("error:") and "name" in message and "\n" not in message
    too_big = tmp_path / "big.tar.gz"
    too_big.write_bytes(b"\0" * (UPLOAD_LIMIT + 1))
    with pytest.raises(Exception, match=r"(?i)size|large|limit|413"):
        client.predict(handle_file(str(too_big)), api_name="/submit")

    message = client.predict(handle_file(str(board_store.archive)), api_name="/submit")
    assert message.startswith("queued 1 job(s) for scripted-editor 1.0.0"), message
    jobs = client.predict(api_name="/queue")
    row = dict(zip(jobs["headers"], jobs["data"][0], strict=True))
    assert row["State"] == "pending" and row["Model"] == "knowgic-tiny" and row["Lost runs"].startswith("0/")
    assert row["Submission"] == "scripted-editor 1.0.0"


def test_new_results_appear_without_a_restart(served, board_store) -> None:
    app, client = served
    from knowgic.leaderboard.table import ALL_MODELS

    entry = board_store.store.add_local(board_store.spare_run).entry_id
    try:
        result = client.predict(*controls(ALL_MODELS), 1, api_name="/reload")
        assert entry in json.dumps(_frame(result[0])["data"])
        # The spare run covers 1 edit, the others 2: a ranking of its own, not in theirs.
        result = client.predict(*controls(), 1, api_name="/reload")
        assert entry not in json.dumps(_frame(result[0])["data"])
        assert any(t.__class__.__name__ == "Timer" for t in app.blocks.values())
    finally:
        board_store.store.entry_path(entry).unlink()
        client.predict(*controls(), 1, api_name="/reload")


def test_plots_follow_the_filters(served, board_store) -> None:
    _, client = served
    _model, tradeoff, lengths = client.predict(
        "knowgic-tiny", *controls(sources=["local"]), api_name="/plots"
    )
    data = json.loads(tradeoff["plot"])["data"]
    names = {trace["name"] for trace in data}
    assert {"none (local)", "ice (local)", "rome (local)", "trade-off frontier"} <= names
    points = [(x, y) for t in data if t["mode"] == "markers" for x, y in zip(t["x"], t["y"], strict=True)]
    docs = [_doc(board_store, e)["metrics"] for e in EDITORS]
    assert sorted(points) == sorted((d["ifr"]["value"], d["preservation"]["value"]) for d in docs)
    # Error bars from each point's interval.
    rome_point = next(t for t in data if t["name"] == "rome (local)")
    ifr = _doc(board_store, "rome")["metrics"]["ifr"]
    assert rome_point["error_x"]["array"][0] == pytest.approx(ifr["interval"][1] - ifr["value"])
    assert rome_point["error_x"]["arrayminus"][0] == pytest.approx(ifr["value"] - ifr["interval"][0])
    line_data = json.loads(lengths["plot"])["data"]
    rome = next(t for t in line_data if t["name"] == "rome (local)")
    by_length = _doc(board_store, "rome")["metrics"]["ifr_by_length"]
    expected = [by_length[str(n)]["value"] if str(n) in by_length else None for n in range(1, 6)]
    assert [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else pytest.approx(v) for v in rome["y"]
    ] == expected
    model, tradeoff, _ = client.predict("GPT2-XL", *controls(), api_name="/plots")
    assert (
        model["value"] == "GPT2-XL" and len(json.loads(tradeoff["plot"])["data"]) == 6
    )  # 5 editors + frontier
    model, _, _ = client.predict("", *controls(), api_name="/plots")
    assert model["value"] == "knowgic-tiny"  # by default the ranking's model


def test_editor_colours_are_stable_and_the_heatmap_says_what_good_is(board_store) -> None:
    from knowgic.leaderboard.plots import editor_colour, heatmap_figure

    assert editor_colour("rome") == "#1f77b4"  # declared in leaderboard/data/methods.yaml
    assert editor_colour("my-editor") == editor_colour("my-editor") != editor_colour("my-editor-2")
    doc = _doc(board_store, "rome")
    figure = heatmap_figure(doc["per_edit"], "t").to_plotly_json()
    heat = figure["data"][0]
    assert heat["x"][0] == "IFR ↓" and heat["x"][1] == "Preservation ↑"
    first = doc["per_edit"][0]
    if first["ifr"] is not None:  # one colour means good in every column: IFR flipped
        assert heat["z"][0][0] == pytest.approx(1 - first["ifr"])
    assert heat["colorbar"]["ticktext"] == ["worse", "better"]
    assert any("grey: undefined" in a["text"] for a in figure["layout"]["annotations"])


def test_the_space_entry_serves_the_configured_store_folder(monkeypatch, tmp_path) -> None:
    from knowgic.leaderboard.commands import STORE_REPO_ENV, serving_store

    monkeypatch.delenv(STORE_REPO_ENV, raising=False)
    monkeypatch.setenv("KNOWGIC_STORE", str(tmp_path / "space-store"))
    (tmp_path / "space-store").mkdir()
    (tmp_path / "given").mkdir()
    assert serving_store(None) == tmp_path / "space-store"
    assert serving_store(tmp_path / "given") == tmp_path / "given"  # an explicit folder wins


def test_names_in_the_status_line_stay_text() -> None:
    """A model or edit set named with an image, a link, a bare address, emphasis or HTML: the status line
    (HTML) makes no element from it, and shows its characters."""
    from html.parser import HTMLParser

    from knowgic.leaderboard.app import _status
    from knowgic.leaderboard.table import TablePage

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[str] = []
            self.text = ""

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            self.tags.append(tag)

        def handle_data(self, data: str) -> None:
            self.text += data

    for name in ("![x](http://example.com/i.png)", "[click](http://example.com)", "<img src=x onerror=alert(1)>",
                 "**bold** _it_ `code` # head", "http://example.com www.example.com a@example.com",
                 "a\u2028b > quote | pipe"):  # fmt: skip
        shown = TablePage([], [], [], [], [], total=1, page=1, pages=1, constant={"dataset": name})
        parsed = Tags()
        parsed.feed(_status(shown, name, notice="verifying"))
        parsed.close()
        assert parsed.tags == ["br", "em"], parsed.tags  # the notice's own line, and nothing else
        plain = " ".join(name.split())
        assert parsed.text == f"1 result(s) of {plain} · all dataset {plain} · page 1 of 1verifying", (
            parsed.text
        )
