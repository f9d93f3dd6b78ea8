"""How the leaderboard scales: page load and filter time in a real browser, 10,000 results against 10.

``python -m knowgic.leaderboard.timing`` fills two stores with copies of real ``evaluate`` runs (each copy renamed
to a varied model and editor, re-hashed, so every file is a valid, hash-checked results document),
verifies every copy once the way the app does (in parallel; the store remembers what it verified), serves
both stores, and measures in one headless Chromium (Debian's ``/usr/bin/chromium``):

- page load: from navigation until the ranking shows its rows and the row count (the model with the most
  runs: 100 at 10,000 results, each ranked by the paired comparison);
- filter: from picking an editor in the Editor filter (under "Advanced") until the table shows the filtered
  rows.

Each is the median of ``--repeats`` fresh page loads (a new browser context each, so no cached assets),
printed in seconds and as the ratio large / small. The target is a ratio of at most 3.

``python -m knowgic.leaderboard.timing --cold`` measures a cold start instead: a store of ``--count`` results that
this reader never verified (an empty verification cache), from ``build_app`` until the first answer of the
page and of the table API, then until background verification has shown every row; and, for reference, how
long verifying the whole store takes before answering (what a reader without background verification waits).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as _dt
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from knowgic.errors import KnowgicError
from knowgic.results import content_sha256
from knowgic.runner.store.store import STORE_VERSION, ResultsStore, local_entry_id

CHROMIUM = "/usr/bin/chromium"
EDITOR_VARIANTS = 20
RESULTS_PER_MODEL = 100
TARGET_RATIO = 3.0


def real_runs(workdir: Path, given: Sequence[Path]) -> list[dict[str, Any]]:
    """Results documents to copy: the given results.json files, else fresh knowgic-tiny runs (offline)."""
    if given:
        from knowgic.evaluation.sweep import results_paths

        paths = results_paths([str(p) for p in given])
    else:
        from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
        from knowgic.models.loading import load_model

        loaded = load_model("knowgic-tiny")
        paths = []
        for editor in ("rome", "ice", "none"):
            request = EvaluationRequest(
                model="knowgic-tiny", editor=editor, limit=1, out_dir=workdir / editor
            )
            paths.append(evaluate(request, progress=False, loaded=loaded).results_path)
    return [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]


def timing_copy(base: dict[str, Any], index: int, count: int) -> dict[str, Any]:
    """Copy ``index`` of ``count``: a varied model (100 results each) and editor (20 variants), re-hashed."""
    models = max(1, count // RESULTS_PER_MODEL)
    document = copy.deepcopy(base)
    config = document["config"]
    config["model"] = f"{config['model']}-timing{index % models:03d}"
    config["editor"] = f"{config['editor']}-v{(index // models) % EDITOR_VARIANTS:02d}"
    created = _dt.datetime.fromisoformat(document["created_at"]) + _dt.timedelta(seconds=index)
    document["created_at"] = created.isoformat()
    document["sha256"] = content_sha256(document)
    return document


def fill_store(root: Path, bases: Sequence[dict[str, Any]], count: int) -> ResultsStore:
    """Write ``count`` copies straight into a new store (results and local entries, as ``store add`` does)."""
    store = ResultsStore(root)
    store.results_dir.mkdir(parents=True, exist_ok=True)
    store.entries_dir.mkdir(parents=True, exist_ok=True)
    added = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    for index in tqdm(range(count), desc=f"writing {count} results", unit="result", leave=False):
        document = timing_copy(bases[index % len(bases)], index, count)
        sha = document["sha256"]
        store.results_path(sha).write_text(
            json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        record = {
            "store_version": STORE_VERSION,
            "entry_id": local_entry_id(sha),
            "source": "local",
            "results_sha256": sha,
            "submission_sha256": None,
            "manifest": None,
            "job": None,
            "added_at": added,
            "label": "timing copy",
        }
        store.entry_path(local_entry_id(sha)).write_text(
            json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    return store


def _verify_chunk(args: tuple[str, str, list[str]]) -> int:
    root, cache, names = args
    store = ResultsStore(root, verified_cache=Path(cache))
    for name in names:
        store.load_entry(store.entries_dir / name)  # schema and hash; the store caches the summary
    return len(names)


def verify_store(store: ResultsStore, cache: Path, workers: int) -> None:
    """Verify every entry once, in ``workers`` processes (the app then reads the verified summaries)."""
    names = sorted(p.name for p in store.entries_dir.iterdir())
    chunks = [(str(store.root), str(cache), names[i : i + 200]) for i in range(0, len(names), 200)]
    with (
        multiprocessing.get_context("spawn").Pool(workers) as pool,
        tqdm(total=len(names), desc="verifying", unit="result", leave=False) as bar,
    ):
        for done in pool.imap_unordered(_verify_chunk, chunks):
            bar.update(done)


@dataclass(frozen=True)
class Timing:
    load_seconds: float
    filter_seconds: float


# The table is ready when the row count reads as expected and its rows are in the page.
_READY = """p => {
  const status = document.querySelector('#kg-status');
  return status && new RegExp(p).test(status.innerText)
    && document.querySelectorAll('#kg-table [role=row].virtual-row').length > 0;
}"""


def measure(browser: Any, url: str, editor: str, expected_total: int) -> Timing:
    """One fresh page: load until the ranking (``expected_total`` runs of the model with the most runs)
    shows; then open the advanced controls and filter by ``editor`` until the filtered rows show."""
    context = browser.new_context(viewport={"width": 1500, "height": 1200})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        start = time.perf_counter()
        page.goto(url)
        page.wait_for_function(_READY, arg=f"(^|\\n){expected_total} result")
        load = time.perf_counter() - start
        page.locator("#kg-advanced").get_by_text("Advanced").first.click()
        page.locator("#kg-filter-editor input").first.click()
        option = page.locator(f"#kg-filter-editor [role=option][aria-label={json.dumps(editor)}]")
        option.wait_for()
        start = time.perf_counter()
        option.click()
        page.wait_for_function(_READY, arg=f"(^|\\n)(?!{expected_total} )\\d+ result")
        filtered = time.perf_counter() - start
        return Timing(load, filtered)
    finally:
        context.close()


def run(
    count: int, baseline: int, repeats: int, workdir: Path, given: Sequence[Path], workers: int
) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from knowgic.leaderboard.app import build_app, launch_app

    if not Path(CHROMIUM).exists():
        raise KnowgicError(f"{CHROMIUM} is missing: install Debian's chromium (.ci/system-packages.sh)")
    bases = real_runs(workdir / "runs", given)
    sizes = {"small": baseline, "large": count}
    apps, urls = {}, {}
    for name, size in sizes.items():
        started = time.perf_counter()
        store = fill_store(workdir / f"store-{size}", bases, size)
        verify_store(store, workdir / "verified", workers)
        app = build_app(store.root, verified_cache=workdir / "verified")
        _, url, _ = launch_app(app, host="127.0.0.1", block=False, quiet=True)
        apps[name], urls[name] = app, url
        print(
            f"{size} results: store filled, verified and served in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    editor = timing_copy(bases[0], 0, baseline)["config"]["editor"]
    shown = {name: _default_model_runs(size) for name, size in sizes.items()}
    timings: dict[str, list[Timing]] = {name: [] for name in sizes}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                for name in sizes:  # a warm-up page each: the server's first request compiles and caches
                    measure(browser, urls[name], editor, shown[name])
                for _ in tqdm(range(repeats), desc="measuring", leave=False):
                    for name in sizes:
                        timings[name].append(measure(browser, urls[name], editor, shown[name]))
            finally:
                browser.close()
    finally:
        for app in apps.values():
            with contextlib.redirect_stdout(sys.stderr):  # gradio says "Closing server…" on stdout
                app.close()
    summary: dict[str, Any] = {"count": count, "baseline": baseline, "repeats": repeats}
    for name in sizes:
        summary[f"{name}_load_seconds"] = statistics.median(t.load_seconds for t in timings[name])
        summary[f"{name}_filter_seconds"] = statistics.median(t.filter_seconds for t in timings[name])
    summary["load_ratio"] = summary["large_load_seconds"] / summary["small_load_seconds"]
    summary["filter_ratio"] = summary["large_filter_seconds"] / summary["small_filter_seconds"]
    return summary


def _default_model_runs(count: int) -> int:
    """Runs of the model the page ranks first (the one with the most runs) in a store of ``count`` copies."""
    models = max(1, count // RESULTS_PER_MODEL)
    return len(range(0, count, models))  # copy i goes to model i % models: model 0 has the most


def cold_start(count: int, workdir: Path, given: Sequence[Path]) -> dict[str, Any]:
    """Seconds from ``build_app`` on a never-verified store of ``count`` results to the first answers."""
    import urllib.request

    from gradio_client import Client

    from knowgic.leaderboard.app import build_app, launch_app
    from knowgic.leaderboard.columns import RANK_METRIC

    store = fill_store(workdir / f"store-cold-{count}", real_runs(workdir / "runs", given), count)
    started = time.perf_counter()
    app = build_app(store.root, verified_cache=workdir / "cache-cold", include_reported=False)
    _, url, _ = launch_app(app, host="127.0.0.1", block=False, quiet=True)
    try:
        with urllib.request.urlopen(url, timeout=600) as response:
            response.read()
        page_seconds = time.perf_counter() - started
        client = Client(url, verbose=False)
        result = client.predict(
            "", "", [], [], [], [], [], RANK_METRIC, "descending", [], 1, api_name="/table"
        )
        table_seconds = time.perf_counter() - started
        first_status = str(result[1]).replace("\n", " ").replace("*", "")
        state = app.leaderboard_state  # type: ignore[attr-defined]
        while state.progress is not None:
            time.sleep(0.1)
        all_seconds = time.perf_counter() - started
        shown = len(state.board.rows)
    finally:
        with contextlib.redirect_stdout(sys.stderr):
            app.close()
    # The reference: verify every file before answering (a fresh cache, so nothing is remembered).
    started = time.perf_counter()
    scan = ResultsStore(store.root, verified_cache=workdir / "cache-sync").scan()
    sync_seconds = time.perf_counter() - started
    return {
        "count": count,
        "page_seconds": page_seconds,
        "table_seconds": table_seconds,
        "first_status": first_status,
        "all_verified_seconds": all_seconds,
        "rows_shown": shown,
        "verify_first_seconds": sync_seconds,
        "verified_by_scan": len(scan.entries),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m knowgic.leaderboard.timing",
        description="Page load and filter time of the leaderboard in headless Chromium: a store of COUNT "
        "results against one of BASELINE results (copies of real runs, varied model and editor names).",
    )
    parser.add_argument(
        "--count", type=int, default=10_000, help="results in the large store (default: 10000)"
    )
    parser.add_argument("--baseline", type=int, default=10, help="results in the small store (default: 10)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="page loads per store; medians are reported (default: 5)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        nargs="*",
        default=[],
        metavar="RESULTS",
        help="results.json files or run folders to copy (default: fresh knowgic-tiny runs of rome, ice, none)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="folder for the stores (default: a temporary folder, removed)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes verifying the copies (default: 2)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="measure the time to first response of a never-verified store of COUNT results instead "
        "(try --count 2000)",
    )
    args = parser.parse_args(argv)
    for option in ("count", "baseline", "repeats", "workers"):
        if getattr(args, option) < 1:
            print(f"error: --{option} must be at least 1", file=sys.stderr)
            return 2

    def measure_in(workdir: Path) -> dict[str, Any]:
        if args.cold:
            return cold_start(args.count, workdir, args.results)
        return run(args.count, args.baseline, args.repeats, workdir, args.results, args.workers)

    try:
        if args.workdir is None:
            with tempfile.TemporaryDirectory(prefix="knowgic-leaderboard-timing-") as tmp:
                summary = measure_in(Path(tmp))
        else:
            args.workdir.mkdir(parents=True, exist_ok=True)
            summary = measure_in(args.workdir)
    except KnowgicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    if args.cold:
        print(f"cold store of {summary['count']} results (nothing verified before):")
        print(f"  first page answer:          {summary['page_seconds']:8.2f} s")
        print(f"  first table answer:         {summary['table_seconds']:8.2f} s  ({summary['first_status']})")
        print(
            f"  every row verified, shown:  {summary['all_verified_seconds']:8.2f} s  ({summary['rows_shown']} rows)"
        )
        print(f"  verifying all before answering (reference): {summary['verify_first_seconds']:.2f} s")
        ratio = summary["verify_first_seconds"] / summary["table_seconds"]
        print(f"  first answer is {ratio:.0f}x sooner than verifying everything first")
        return 0
    print(f"{'':<12}{args.baseline:>10} results{args.count:>10} results{'ratio':>10}")
    for what in ("load", "filter"):
        small, large = summary[f"small_{what}_seconds"], summary[f"large_{what}_seconds"]
        print(f"{what + ' (s)':<12}{small:>18.3f}{large:>18.3f}{large / small:>10.2f}")
    verdict = max(summary["load_ratio"], summary["filter_ratio"]) <= TARGET_RATIO
    print(f"target: ratio <= {TARGET_RATIO:g} at {args.count} results: {'met' if verdict else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
