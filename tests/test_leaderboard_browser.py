"""The leaderboard in a real browser: Debian's Chromium, headless, driven by playwright.

A person's path through the app: load the page, filter, search and sort, open a result by its permalink,
compare two results, submit an archive and see it queued, read the skipped panel, and see a new result
appear without a reload. Assertions are on elements and text; screenshots are saved for a person to look
at (``$KNOWGIC_TEST_ARTIFACTS``, else the test's temporary folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_leaderboard import SCRIPT, build_leaderboard_store, free_port, wait_verified

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_MS = 60_000  # generous: CI machines are shared


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("KNOWGIC_TEST_ARTIFACTS") or tmp_path_factory.mktemp("artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def site(knowgic_tiny, tmp_path_factory):
    from leaderboard.app import build_app, launch_app

    board = build_leaderboard_store(tmp_path_factory.mktemp("leaderboard-browser"), knowgic_tiny)
    app = build_app(board.store.root, refresh_seconds=1.0)
    port = free_port()
    launch_app(app, host="127.0.0.1", port=port, block=False, quiet=True)
    wait_verified(app)
    try:
        yield board, f"http://127.0.0.1:{port}/"
    finally:
        app.close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (.ci/system-packages.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1200})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs  # type: ignore[attr-defined]
    yield page
    assert dialogs == [], f"a script ran in the page: {dialogs}"
    context.close()


def status_text(page) -> str:
    return page.locator("#kg-status").inner_text()


def wait_status(page, pattern: str) -> str:
    page.wait_for_function(
        "p => { const s = document.querySelector('#kg-status'); return s && new RegExp(p).test(s.innerText); }",
        arg=pattern,
    )
    return status_text(page)


def table_column(page, header: str) -> list[str]:
    headers = [h.strip() for h in page.locator("#kg-table thead th").all_inner_texts() if h.strip()]
    index = next(i for i, h in enumerate(headers) if h.startswith(header))
    rows = page.locator("#kg-table [role=row].virtual-row")
    return [rows.nth(r).locator(f"[data-col='{index}']").inner_text().strip() for r in range(rows.count())]


def choose(page, elem_id: str, option: str) -> None:
    """Pick ``option`` in a Gradio drop-down (single or multiple)."""
    page.locator(f"#{elem_id} input").first.click()
    page.locator(f"#{elem_id} [role=option][aria-label={json.dumps(option, ensure_ascii=False)}]").click()
    page.keyboard.press("Escape")


def test_browse_filter_search_sort(site, page, artifacts) -> None:
    _board, url = site
    page.goto(url)
    status = wait_status(page, r"(^|\n)19 result")
    assert "19 result(s) match of 19" in status
    assert "IFR n=1" not in page.locator("#kg-table thead").inner_text()
    # An undefined metric: "–", its reason on hover (title), never 0.
    undefined = page.locator("#kg-table .kg-undefined").first
    assert undefined.inner_text() == "–" and "not reported" in undefined.get_attribute("title")
    page.screenshot(path=str(artifacts / "01-table.png"), full_page=True)

    choose(page, "kg-filter-editor", "rome")
    wait_status(page, r"(^|\n)4 result")
    assert set(table_column(page, "Editor")) == {"rome"}
    choose(page, "kg-filter-source", "reported")
    wait_status(page, r"(^|\n)3 result")
    page.screenshot(path=str(artifacts / "02-filtered.png"), full_page=True)

    search = page.locator("#kg-search textarea, #kg-search input").first
    search.fill("llama")
    wait_status(page, r"(^|\n)1 result")
    assert table_column(page, "Model") == ["Llama-3-8B"]
    search.fill("")
    wait_status(page, r"(^|\n)3 result")

    choose(page, "kg-sort", "IFR")
    page.locator("#kg-order label", has_text="ascending").click()
    page.wait_for_function(
        "() => { const c = document.querySelector('#kg-table [data-testid=\"cell-0-0\"]');"
        " return c && c.innerText.trim() === 'Llama-3-8B'; }"
    )
    assert table_column(page, "Model") == ["Llama-3-8B", "Qwen2.5-7B", "GPT2-XL"]  # IFR 0.217 < 0.261 < 0.279
    page.screenshot(path=str(artifacts / "03-sorted.png"), full_page=True)

    # Column selection: IFR by chain length on.
    page.locator("#kg-columns label", has_text="IFR n=3").click()
    page.wait_for_function("() => document.querySelector('#kg-table thead').innerText.includes('IFR n=3')")

    # What a submitter wrote is text in the table too.
    page.locator("#kg-columns label", has_text="Submitted by").click()
    page.wait_for_function(
        "() => document.querySelector('#kg-table thead').innerText.includes('Submitted by')"
    )
    choose(page, "kg-filter-source", "reported")  # off again
    search.fill("Mallory")
    wait_status(page, r"(^|\n)0 result")  # the editor filter (rome) hides the ICE submission
    choose(page, "kg-filter-editor", "rome")  # off again
    wait_status(page, r"(^|\n)1 result")
    assert SCRIPT in " ".join(table_column(page, "Submitted by"))
    assert page.locator("#kg-table script, #kg-table img").count() == 0
    search.fill("")
    choose(page, "kg-filter-editor", "rome")
    choose(page, "kg-filter-source", "reported")
    wait_status(page, r"(^|\n)3 result")

    # The plots follow the filters: Llama-3-8B's reported ROME point and the frontier.
    page.get_by_role("tab", name="Plots").click()
    page.locator("#kg-tradeoff svg.main-svg").first.wait_for()
    legend = page.locator("#kg-tradeoff").inner_text()
    assert "rome (reported)" in legend and "trade-off frontier" in legend
    page.locator("#kg-lengths svg.main-svg").first.wait_for()
    page.screenshot(path=str(artifacts / "03b-plots.png"), full_page=True)

    # A click on a row opens its detail view.
    page.get_by_role("tab", name="Leaderboard").click()
    page.locator("#kg-table [data-testid='cell-0-0']").click()
    page.locator("#kg-detail-header h3", has_text="Llama-3-8B · rome").wait_for()


def test_detail_by_permalink(site, page, artifacts) -> None:
    board, url = site
    entry = board.entries["verified"]
    page.goto(f"{url}?result={entry}")
    header = page.locator("#kg-detail-header")
    header.locator("h3").wait_for()
    assert "knowgic-tiny · ice" in header.inner_text()
    assert SCRIPT in header.inner_text()  # the manifest's markup, shown as text
    assert header.locator("script").count() == 0 and header.locator("img").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    page.locator("#kg-per-edit [role=row].virtual-row").first.wait_for()
    page.locator("#kg-chains [role=row].virtual-row").first.wait_for()
    assert "r_post" in page.locator("#kg-chains thead").inner_text()
    page.locator("#kg-heatmap svg.main-svg").first.wait_for()  # plotly drew the per-edit heatmap
    assert "Generalization" in page.locator("#kg-heatmap").inner_text()
    assert "results-" in page.locator("#kg-detail-download").inner_text()
    page.screenshot(path=str(artifacts / "04-detail.png"), full_page=True)


def test_compare_two_results(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"result")
    page.get_by_role("tab", name="Compare").click()
    choose(page, "kg-compare-model", "knowgic-tiny")
    choose(page, "kg-compare-a", f"knowgic-tiny · none · logprob · independent · {board.entries['none']}")
    choose(page, "kg-compare-b", f"knowgic-tiny · rome · logprob · independent · {board.entries['rome']}")
    page.locator("#kg-compare-button").click()
    page.wait_for_function(
        "() => { const t = document.querySelector('#kg-compare-message textarea');"
        " return t && t.value.includes('paired'); }"
    )
    page.locator("#kg-compare-metrics [role=row].virtual-row").first.wait_for()
    assert "Paired interval" in page.locator("#kg-compare-metrics thead").inner_text()
    assert "IFR" in page.locator("#kg-compare-metrics").inner_text()
    page.screenshot(path=str(artifacts / "05-compare.png"), full_page=True)

    # The same comparison by its permalink.
    page.goto(f"{url}?a={board.entries['none']}&b={board.entries['rome']}")
    page.wait_for_function(
        "() => { const t = document.querySelector('#kg-compare-message textarea');"
        " return t && t.value.includes('paired'); }"
    )
    page.locator("#kg-compare-edits [role=row].virtual-row").first.wait_for()


def test_submit_an_archive_and_see_it_queued(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"result")
    page.get_by_role("tab", name="Submit").click()
    page.locator("#kg-upload input[type=file]").set_input_files(str(board.archive))
    page.locator("#kg-upload").get_by_text("scripted-editor.tar.gz").first.wait_for()
    page.locator("#kg-submit").click()
    page.wait_for_function(
        "() => { const t = document.querySelector('#kg-submit-message textarea');"
        " return t && t.value.startsWith('queued'); }"
    )
    page.screenshot(path=str(artifacts / "06-submitted.png"), full_page=True)
    page.get_by_role("tab", name="Queue").click()
    job = page.locator("#kg-queue [role=row].virtual-row", has_text="scripted-editor 1.0.0").first
    job.wait_for()
    assert "pending" in job.inner_text() and "knowgic-tiny" in job.inner_text()

    # A worker takes the job and it fails: the queue view follows without a reload.
    from runner.queue import JobQueue

    queue = JobQueue(board.store.queue_url())
    try:
        claimed = queue.claim("browser-test-worker")
        assert claimed is not None
        queue.fail(claimed.job_id, "browser-test-worker", "the edit stage ran out of memory (test)")
    finally:
        queue.close()
    failed = page.locator("#kg-queue [role=row].virtual-row", has_text="ran out of memory").first
    failed.wait_for()
    assert "failed" in failed.inner_text() and "running" in failed.inner_text()  # time in each state
    page.screenshot(path=str(artifacts / "07-queue.png"), full_page=True)


def test_skipped_panel_and_a_new_result_without_reload(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"(^|\n)19 result")
    page.locator("#kg-skipped").get_by_text("Skipped files (4)").click()
    panel = page.locator("#kg-skipped-table")
    panel.get_by_text("not valid JSON").first.wait_for()
    text = panel.inner_text()
    assert board.forged_entry in text and "does not match its content" in text
    assert "local-dangling" in text and "unreadable.json" in text
    page.screenshot(path=str(artifacts / "08-skipped.png"), full_page=True)

    entry = board.store.add_local(board.spare_run).entry_id  # the timer picks it up: no reload
    try:
        wait_status(page, r"(^|\n)20 result")
    finally:
        board.store.entry_path(entry).unlink()


def test_a_cold_store_shows_its_rows_as_they_are_verified(
    knowgic_tiny, tmp_path, page, artifacts, monkeypatch
):
    """A store nobody verified yet: the page answers at once with a notice; rows appear as they pass; a
    hand-written "verified" entry reads as local with the reason."""
    import threading

    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
    from leaderboard.app import build_app, launch_app
    from leaderboard.bench import fill_store
    from runner.store import ResultsStore

    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1, out_dir=tmp_path / "run"),
        progress=False,
        loaded=knowgic_tiny,
    ).results_path
    store = fill_store(tmp_path / "store", [json.loads(run.read_text(encoding="utf-8"))], 40)
    claimed = json.loads(next(store.entries_dir.iterdir()).read_text(encoding="utf-8"))
    claimed.update(entry_id="job-claims-verified", source="verified", submission_sha256=None)
    archive = store.put_submission(_submission_archive(tmp_path))
    claimed["submission_sha256"] = archive
    store.entry_path("job-claims-verified").write_text(json.dumps(claimed), encoding="utf-8")

    gate = threading.Event()
    real_load = ResultsStore.load_entry
    monkeypatch.setattr(
        ResultsStore, "load_entry", lambda self, path: (gate.wait(60), real_load(self, path))[1]
    )
    app = build_app(
        store.root, refresh_seconds=1.0, verified_cache=tmp_path / "cache", include_reported=False
    )
    port = free_port()
    launch_app(app, host="127.0.0.1", port=port, block=False, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        page.goto(url)
        text = wait_status(page, r"verifying 0 of 41 results")
        assert text.startswith("0 result(s) match of 0")
        page.screenshot(path=str(artifacts / "09-verifying.png"), full_page=True)
        gate.set()
        text = wait_status(page, r"^41 result\(s\) match of 41")
        page.wait_for_function("() => !document.querySelector('#kg-status').innerText.includes('verifying')")
        page.screenshot(path=str(artifacts / "10-verified.png"), full_page=True)

        page.goto(f"{url}?result=job-claims-verified")
        trust = page.locator("#kg-detail-header .kg-trust")
        trust.wait_for()
        assert trust.inner_text() == (
            "local: shown as local: it claims to be verified, but it carries no signature"
        )
        page.screenshot(path=str(artifacts / "11-claimed-verified.png"), full_page=True)
    finally:
        gate.set()
        app.close()


def _submission_archive(folder: Path) -> Path:
    """A small .tar.gz standing in for a submission archive (the store only hashes and keeps it)."""
    import tarfile

    source = folder / "submission.yaml"
    source.write_text("name: demo\n", encoding="utf-8")
    archive = folder / "demo.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="submission.yaml")
    return archive
