"""The leaderboard in a real browser: Debian's Chromium, headless, driven by playwright.

A person's path through the app: the first screen (a ranking of one model's runs, at 1400 × 900 and on a
phone at 390 × 844), the reported rows set apart, the advanced controls, the plots, a result by its
permalink, a comparison, a submission and the queue, the skipped panel, a new result appearing without a
reload. At both sizes: no empty placeholder table before a choice, no word of a table broken over two
lines, every metric's interval inside its cell, a plug-in editor by its class name; and runs named with
markup, which makes no element anywhere. Assertions are on elements, their text and their place on the
screen.

Screenshots of every tab at 1400 × 900 and 390 × 844 are saved for a person to look at, in
``$KNOWGIC_TEST_ARTIFACTS`` when set (``.ci/run`` keeps that folder), else in the test session's temporary
folder (``<pytest tmp>/artifacts0``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
from tests.test_leaderboard import SCRIPT, build_leaderboard_store, free_port, wait_verified

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_MS = 120_000  # generous: CI machines are shared
WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
# With the fixture's none, ice, rome and verified runs: ten ranked runs of knowgic-tiny, every one on all 26
# edits of the latest version (full runs: the ranking the README's picture shows).
EXTRA_EDITORS = ("memit", "alphaedit", "prune", "rect", "ft", "lora")
HEADLINE_HEADERS = (
    "Rank",
    "Editor",
    "IFR (paper)",
    "IFR (per edit)",
    "Preservation (paper)",
    "Preservation (macro)",
    "Efficacy",
    "Specificity",
    "Deep-editing score",
)
TABS = ("Leaderboard", "Plots", "Result", "Compare", "Submit", "Queue", "About")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("KNOWGIC_TEST_ARTIFACTS") or tmp_path_factory.mktemp("artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def site(knowgic_tiny, tmp_path_factory):
    from knowgic.leaderboard.app import build_app, launch_app

    root = tmp_path_factory.mktemp("leaderboard-browser")
    board = build_leaderboard_store(root, knowgic_tiny, limit=None)
    for editor in EXTRA_EDITORS:
        request = EvaluationRequest(model="knowgic-tiny", editor=editor, out_dir=root / "runs" / editor)
        run = evaluate(request, progress=False, loaded=knowgic_tiny).results_path
        board.entries[editor] = board.store.add_local(run, label=f"{editor} run").entry_id
    app = build_app(board.store.root, refresh_seconds=1.0, verified_cache=root / "cache")
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


def _page(browser, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    return context, page, dialogs


@pytest.fixture
def page(browser):
    context, page, dialogs = _page(browser, WIDE)
    yield page
    assert dialogs == [], f"a script ran in the page: {dialogs}"
    context.close()


@pytest.fixture
def phone(browser):
    context, page, dialogs = _page(browser, PHONE)
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


def headers(page, table: str = "#kg-table") -> list[str]:
    return [" ".join(h.split()) for h in page.locator(f"{table} thead th").all_inner_texts() if h.strip()]


def table_column(page, header: str, table: str = "#kg-table") -> list[str]:
    index = next(i for i, h in enumerate(headers(page, table)) if h.startswith(header))
    rows = page.locator(f"{table} [role=row].virtual-row")
    return [rows.nth(r).locator(f"[data-col='{index}']").inner_text().strip() for r in range(rows.count())]


def choose(page, elem_id: str, option: str) -> None:
    """Pick ``option`` in a Gradio drop-down (single or multiple)."""
    page.locator(f"#{elem_id} input").first.click()
    page.locator(f"#{elem_id} [role=option][aria-label={json.dumps(option, ensure_ascii=False)}]").click()
    page.keyboard.press("Escape")


def unchoose(page, elem_id: str, option: str) -> None:
    """Take ``option`` out of a multiple-choice drop-down (its token's remove button)."""
    page.locator(f"#{elem_id} .token", has_text=option).locator(".token-remove").click()


def open_tab(page, name: str) -> None:
    """Open a tab, through the tab bar's overflow menu where the bar is too narrow (a phone)."""
    tab = page.get_by_role("tab", name=name, exact=True)
    if tab.count() and tab.first.is_visible():
        tab.first.click()
        return
    page.get_by_label("More tabs").click()
    page.locator(".overflow-dropdown button", has_text=re.compile(f"^{name}$")).click()


def open_advanced(page) -> None:
    if not page.locator("#kg-search").is_visible():
        page.locator("#kg-advanced").get_by_text("Advanced").first.click()
        page.locator("#kg-search").wait_for()


def box(locator) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None, "not laid out"
    return found


def test_first_screen_is_a_ranking(site, page, artifacts) -> None:
    """At 1400 × 900, without scrolling: at least 10 ranked rows with every headline metric."""
    board, url = site
    page.goto(url)
    status = wait_status(page, r"(^|\n)10 result\(s\) of knowgic-tiny")
    page.locator("#kg-table [role=row].virtual-row").nth(9).wait_for()
    # Columns holding one value in every row are hidden, and said once in the status line.
    shown = headers(page)
    assert shown[: len(HEADLINE_HEADERS)] == list(HEADLINE_HEADERS), shown
    assert not {"Model", "Protocol", "Mode", "Dataset"} & set(shown)
    assert "logprob" in status and "independent" in status and "all 26 edits" in status
    for header in page.locator("#kg-table thead th").all():
        if header.inner_text().strip() in HEADLINE_HEADERS:
            assert box(header)["x"] + box(header)["width"] <= WIDE["width"], header.inner_text()
    rows = page.locator("#kg-table [role=row].virtual-row")
    visible = [r for r in range(rows.count()) if box(rows.nth(r))["y"] + box(rows.nth(r))["height"] <= 900]
    assert len(visible) >= 10, f"{len(visible)} rows on the first screen"
    # Ranks: ranges ("2–5") from 1, in the order of the score: neither end ever goes back.
    ranks = [[int(x) for x in r.split("–")] for r in table_column(page, "Rank")]
    lows, highs = [r[0] for r in ranks], [r[-1] for r in ranks]
    assert lows[0] == 1 and lows == sorted(lows) and highs == sorted(highs), ranks
    assert any(len(r) == 2 for r in ranks) and highs[-1] <= 10, ranks
    # Every headline value of every row carries its interval, in a readable size and colour.
    ifr = page.locator("#kg-table .kg-metric").first
    sizes = ifr.evaluate(
        "e => [getComputedStyle(e.querySelector('.kg-value')).fontSize,"
        " getComputedStyle(e.querySelector('.kg-interval')).fontSize]"
    )
    assert float(sizes[1][:-2]) >= 0.9 * float(sizes[0][:-2]), sizes
    # The controls are folded away; the reported rows of other models are not in this ranking.
    assert not page.locator("#kg-search").is_visible()
    assert not page.locator("#kg-reported-box").is_visible()
    assert all(not e.startswith("reported-") for e in board.entries.values())
    page.screenshot(path=str(artifacts / "wide-01-ranking.png"))


def test_phone_shows_the_ranking_first(site, phone, artifacts) -> None:
    _board, url = site
    phone.goto(url)
    wait_status(phone, r"(^|\n)10 result")
    first = box(phone.locator("#kg-table [role=row].virtual-row").first)
    assert first["y"] + first["height"] <= PHONE["height"], first  # a ranked row on the first screen
    for header in ("Rank", "Editor", "IFR (paper)"):
        cell = box(phone.locator("#kg-table thead th", has_text=header).first)
        assert cell["x"] + cell["width"] <= PHONE["width"] + 1, (header, cell)
    phone.screenshot(path=str(artifacts / "phone-01-ranking.png"))


def test_reported_rows_are_set_apart(site, page, artifacts) -> None:
    _board, url = site
    page.goto(url)
    wait_status(page, r"result")
    choose(page, "kg-model", "GPT2-XL (reported)")
    wait_status(page, r"(^|\n)0 result\(s\) of GPT2-XL")
    page.locator("#kg-reported-box").wait_for(state="visible")
    assert "Reported by the KnowGIC paper's authors" in page.locator("#kg-reported-box").inner_text()
    assert sorted(table_column(page, "Editor", "#kg-reported")) == [
        "alphaedit",
        "memit",
        "prune",
        "rect",
        "rome",
    ]
    assert "Rank" not in headers(page, "#kg-reported")
    page.screenshot(path=str(artifacts / "wide-02-reported.png"), full_page=True)


def test_advanced_search_filter_sort_and_columns(site, page, artifacts) -> None:
    _board, url = site
    page.goto(url)
    wait_status(page, r"(^|\n)10 result")
    open_advanced(page)
    choose(page, "kg-filter-editor", "rome")
    wait_status(page, r"(^|\n)1 result")
    assert table_column(page, "Editor") == ["rome"]
    unchoose(page, "kg-filter-editor", "rome")
    wait_status(page, r"(^|\n)10 result")

    search = page.locator("#kg-search textarea, #kg-search input").first
    search.fill("Mallory")  # the verified run's submitter: shown as text
    wait_status(page, r"(^|\n)1 result")
    page.locator("#kg-columns label", has_text="Submitted by").click()
    page.wait_for_function(
        "() => document.querySelector('#kg-table thead').innerText.includes('Submitted by')"
    )
    assert SCRIPT in " ".join(table_column(page, "Submitted by"))
    assert page.locator("#kg-table script, #kg-table img").count() == 0
    search.fill("")
    wait_status(page, r"(^|\n)10 result")
    assert sum("verified" in e for e in table_column(page, "Editor")) == 1  # the verified run is marked
    page.locator("#kg-columns label", has_text="IFR n=3").click()
    page.wait_for_function("() => document.querySelector('#kg-table thead').innerText.includes('IFR n=3')")

    choose(page, "kg-sort", "IFR (paper)")
    page.locator("#kg-order label", has_text="ascending").click()
    page.wait_for_timeout(500)
    values = [float(v.split()[0]) for v in table_column(page, "IFR") if v != "–"]
    assert values == sorted(values)
    page.screenshot(path=str(artifacts / "wide-03-advanced.png"), full_page=True)

    # A click on a row opens its detail view.
    page.locator("#kg-table [data-testid='cell-0-2']").click()
    page.locator("#kg-detail-header h3", has_text="knowgic-tiny").wait_for()


def test_plots_have_error_bars_stable_colours_and_a_legend_in_view(site, page, phone, artifacts) -> None:
    _board, url = site
    for view, name in ((page, "wide"), (phone, "phone")):
        view.goto(url)
        wait_status(view, r"result")
        open_tab(view, "Plots")
        figure = view.locator("#kg-tradeoff")
        figure.locator("svg.main-svg").first.wait_for()
        assert figure.locator("g.errorbar").count() >= 10  # one per run, each from its interval
        legend, plot = box(figure.locator("g.legend")), box(figure.locator("svg.main-svg").first)
        assert legend["x"] >= plot["x"] - 1 and legend["x"] + legend["width"] <= plot["x"] + plot["width"] + 1
        assert "rome (local)" in figure.inner_text() and "trade-off frontier" in figure.inner_text()
        drawing = box(figure.locator("g.cartesianlayer .bg, rect.bg").first)
        assert drawing["width"] >= (250 if name == "phone" else 900), drawing
        view.locator("#kg-lengths svg.main-svg").first.wait_for()
    from knowgic.leaderboard.plots import editor_colour

    assert editor_colour("rome") == "#1f77b4" and editor_colour("my-editor") == editor_colour("my-editor")


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
    # Every headline metric in view, without scrolling inside the table.
    metrics = page.locator("#kg-detail-metrics")
    metrics.locator("[role=row].virtual-row").first.wait_for()
    names = table_column(page, "Metric", "#kg-detail-metrics")
    assert {"IFR (paper)", "IFR (per edit)", "Preservation (paper)", "Efficacy", "Deep-editing score"} <= set(
        names
    )
    assert table_column(page, "Better", "#kg-detail-metrics")[names.index("IFR (paper)")].startswith("lower")
    page.locator("#kg-chains [role=row].virtual-row").first.wait_for()
    length = box(page.locator("#kg-chains thead th", has_text="length").first)
    assert length["height"] < 80, length  # the header on one or two lines, not a letter a line
    assert "→" in " ".join(table_column(page, "chain", "#kg-chains"))  # the chain's text is shown
    heatmap = page.locator("#kg-heatmap")
    heatmap.locator("svg.main-svg").first.wait_for()
    assert "grey: undefined" in heatmap.inner_text() and "better" in heatmap.inner_text()
    assert "results-" in page.locator("#kg-detail-download").inner_text()
    page.screenshot(path=str(artifacts / "wide-04-result.png"), full_page=True)


def test_compare_says_which_run_is_better(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"result")
    open_tab(page, "Compare")
    choose(page, "kg-compare-model", "knowgic-tiny")
    choose(page, "kg-compare-a", f"knowgic-tiny · none · logprob · independent · {board.entries['none']}")
    choose(page, "kg-compare-b", f"knowgic-tiny · rome · logprob · independent · {board.entries['rome']}")
    page.locator("#kg-compare-button").click()
    message = page.locator("#kg-compare-message")
    message.get_by_text("Deep-editing score").first.wait_for()
    assert re.search(r"(A|B) is better on|[Nn]ot told apart", message.inner_text())
    link = message.locator("a.kg-permalink")
    assert link.get_attribute("href") == f"?a={board.entries['none']}&b={board.entries['rome']}"
    assert "Verdict" in headers(page, "#kg-compare-metrics")
    page.screenshot(path=str(artifacts / "wide-05-compare.png"), full_page=True)
    link.click()  # the permalink opens the same comparison
    page.locator("#kg-compare-message a.kg-permalink").wait_for()
    page.locator("#kg-compare-edits [role=row].virtual-row").first.wait_for()


def test_queue_is_empty_then_shows_a_submission(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"result")
    open_tab(page, "Queue")
    page.locator("#kg-queue-note").get_by_text("No jobs yet").wait_for()
    open_tab(page, "Submit")
    page.locator("#kg-upload input[type=file]").set_input_files(str(board.archive))
    page.locator("#kg-upload").get_by_text("scripted-editor.tar.gz").first.wait_for()
    page.locator("#kg-submit").click()
    page.wait_for_function(
        "() => { const t = document.querySelector('#kg-submit-message textarea');"
        " return t && t.value.startsWith('queued'); }"
    )
    open_tab(page, "Queue")
    job = page.locator("#kg-queue [role=row].virtual-row", has_text="scripted-editor 1.0.0").first
    job.wait_for()
    assert "pending" in job.inner_text() and "knowgic-tiny" in job.inner_text()
    assert "1 job(s): 1 pending" in page.locator("#kg-queue-note").inner_text()

    # A worker takes the job and it fails: the queue view follows without a reload.
    from knowgic.runner.queue.queue import JobQueue

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


def test_skipped_panel_wraps_reasons_and_a_new_result_appears_without_reload(site, page, artifacts) -> None:
    board, url = site
    page.goto(url)
    wait_status(page, r"(^|\n)10 result")
    page.locator("#kg-skipped").get_by_text("Skipped files (4)").click()
    panel = page.locator("#kg-skipped-table")
    panel.get_by_text("not valid JSON").first.wait_for()
    text = panel.inner_text()
    assert board.forged_entry in text and "does not match its content" in text
    assert "local-dangling" in text and "unreadable.json" in text
    for cell in panel.locator("[role=gridcell]").all():  # long reasons wrap: nothing cut at the right
        assert cell.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), cell.inner_text()
    page.screenshot(path=str(artifacts / "wide-06-skipped.png"), full_page=True)

    # The spare run covers one edit: a ranking of its own, so it is watched for among every model's runs.
    choose(page, "kg-model", "All models (no ranks)")
    wait_status(page, r"(^|\n)10 result")
    entry = board.store.add_local(board.spare_run).entry_id  # the timer picks it up: no reload
    try:
        wait_status(page, r"(^|\n)11 result")
    finally:
        board.store.entry_path(entry).unlink()
    wait_status(page, r"(^|\n)10 result")


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400x900", "390x844"])
def test_screenshots_of_every_tab(site, browser, artifacts, viewport) -> None:
    """Every tab at both sizes, for a person to judge (the README's images come from these)."""
    board, url = site
    context, view, dialogs = _page(browser, viewport)
    try:
        view.goto(f"{url}?a={board.entries['none']}&b={board.entries['rome']}")
        view.locator("#kg-compare-message a.kg-permalink").wait_for()
        size = f"{viewport['width']}x{viewport['height']}"
        for number, name in enumerate(TABS, 1):
            if name == "Result":
                view.goto(f"{url}?result={board.entries['rome']}")
                view.locator("#kg-detail-header h3").wait_for()
                view.locator("#kg-heatmap svg.main-svg").first.wait_for()
            else:
                open_tab(view, name)
            if name == "Plots":
                view.locator("#kg-tradeoff svg.main-svg").first.wait_for()
                view.locator("#kg-lengths svg.main-svg").first.wait_for()
            view.wait_for_timeout(800)  # let plots and tables settle
            view.screenshot(path=str(artifacts / f"{size}-{number}-{name.lower()}.png"))
        assert dialogs == []
    finally:
        context.close()
    # One screenshot per tab (the folder may hold other tests' shots, and an earlier run's).
    shots = [artifacts / f"{size}-{number}-{name.lower()}.png" for number, name in enumerate(TABS, 1)]
    assert all(shot.stat().st_size > 0 for shot in shots)


def test_a_cold_store_shows_its_rows_as_they_are_verified(
    knowgic_tiny, tmp_path, page, artifacts, monkeypatch
):
    """A store nobody verified yet: the page answers at once with a notice; rows appear as they pass; a
    hand-written "verified" entry reads as local with the reason."""
    import threading

    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate
    from knowgic.leaderboard.app import build_app, launch_app
    from knowgic.leaderboard.timing import fill_store
    from knowgic.runner.store.store import ResultsStore

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
        assert re.search(r"(^|\n)0 result\(s\)", text), text  # after Gradio's timer, when it shows
        page.screenshot(path=str(artifacts / "09-verifying.png"), full_page=True)
        gate.set()
        text = wait_status(page, r"^41 result\(s\)")
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


# -- the rough edges: placeholders, words cut, long names, launch messages (both sizes) --------------------

SIZES = pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400x900", "390x844"])
PLUGIN_EDITOR = (
    "knowgic_rank_one.editor:RankOneFT"  # the example plug-in's entry point (examples/custom_editor)
)

# Every shown text node of these elements: header cells of every table (the About page's included), and the
# cells of the ranking and of the queue.
WORDS_CHECKED = ".table-wrap th span.header, #kg-about th, #kg-table td, #kg-queue td"
BROKEN_WORDS = """selector => {
  const broken = [];
  for (const element of document.querySelectorAll(selector)) {
    if (!element.getClientRects().length) continue;  // not shown
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      // a word: letters between spaces, hyphens and slashes (where a line may break)
      for (const word of node.data.matchAll(/[^\\s\\-\\u2010-\\u2014\\/]+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken;
}"""
# The headers of the tables shown that are only numbers: Gradio's placeholder of a table without a value.
PLACEHOLDER_TABLES = """() => [...document.querySelectorAll('.table-wrap thead')]
  .filter(head => head.getClientRects().length)
  .map(head => head.innerText.split(/\\s+/).filter(Boolean).join(' '))
  .filter(text => /^\\d+( \\d+)*$/.test(text))"""
# Each metric cell of the ranking: the boxes of its value, its interval, all it shows (value, interval and
# marks) and its cell.
METRIC_BOXES = """() => [...document.querySelectorAll('#kg-table [role=row].virtual-row .kg-metric')].map(metric => {
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const interval = metric.querySelector('.kg-interval');
  const parts = [...metric.children].map(box);
  const shown = {left: Math.min(...parts.map(b => b.left)), right: Math.max(...parts.map(b => b.right))};
  return {value: box(metric.querySelector('.kg-value')), interval: interval && box(interval), shown,
          cell: box(metric.closest('[data-col]')), col: Number(metric.closest('[data-col]').dataset.col)};
})"""


def renamed_run(source: Path, folder: Path, **config: str) -> Path:
    """A real run under other names (``config``: its model or editor), hashed and checked again by the
    results module and written as ``evaluate`` writes it: a valid results file, which the store takes."""
    import copy

    from knowgic.evaluation.outputs import write_results
    from knowgic.results import finalize, read_results

    document = copy.deepcopy(dict(read_results(source)))
    document["config"].update(config)
    folder.mkdir(parents=True, exist_ok=True)
    return write_results(finalize(document), folder)


class Stored:
    """Runs added to the site's store as local runs for one test, taken out again (entry and results
    file) when it ends: the other tests see the store they expect."""

    def __init__(self, board, runs: dict[str, Path]) -> None:
        self.board, self.runs, self.entries = board, runs, {}

    def __enter__(self) -> dict[str, str]:
        for name, path in self.runs.items():
            self.entries[name] = self.board.store.add_local(path, label=name).entry_id
        return self.entries

    def __exit__(self, *exc_info) -> None:
        store = self.board.store
        for entry in self.entries.values():
            record = json.loads(store.entry_path(entry).read_text(encoding="utf-8"))
            store.entry_path(entry).unlink()
            store.results_path(record["results_sha256"]).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def finished_job(site) -> str:
    """A job a worker finished, so that the queue shows the state "finished" (the word that broke)."""
    from knowgic.leaderboard.accounts import leaderboard_policy, submit_upload
    from knowgic.runner.queue.queue import JobQueue
    from tests.test_leaderboard import write_submission

    board, _url = site
    queue = JobQueue(board.store.queue_url())
    try:
        archive = write_submission(board.root / "finished-submission", name="finished-editor")
        submit_upload(archive, board.store, queue, leaderboard_policy())
        claimed = queue.claim("browser-test-worker")
        assert claimed is not None
        queue.finish(claimed.job_id, "browser-test-worker", "0" * 64)
        return claimed.job_id
    finally:
        queue.close()


@SIZES
def test_result_and_compare_tabs_show_no_empty_tables(site, browser, artifacts, viewport) -> None:
    """Opened from the tab bar before anything is chosen: a prompt, not an empty table headed "1 2 3"; the
    Compare tab's lists are filled from the store (the ranking's model, its runs for A and B)."""
    board, url = site
    size = f"{viewport['width']}x{viewport['height']}"
    context, view, dialogs = _page(browser, viewport)
    try:
        view.goto(url)
        wait_status(view, r"(^|\n)10 result")
        for name in TABS:
            open_tab(view, name)
            view.wait_for_timeout(300)
            assert view.evaluate(PLACEHOLDER_TABLES) == [], name
            if name == "Result":
                view.locator("#kg-detail-header", has_text="Choose a result").wait_for()
                assert not view.locator("#kg-detail-metrics").is_visible()
                assert not view.locator("#kg-chains").is_visible()
                view.screenshot(path=str(artifacts / f"{size}-result-unchosen.png"))
            if name == "Compare":
                view.locator("#kg-compare-message", has_text="Choose a model").wait_for()
                assert not view.locator("#kg-compare-metrics").is_visible()
                assert not view.locator("#kg-compare-edits").is_visible()
                assert view.locator("#kg-compare-model input").input_value() == "knowgic-tiny"
                view.locator("#kg-compare-a input").click()
                runs = view.locator("#kg-compare-a [role=option]")
                runs.first.wait_for()
                # every stored run of knowgic-tiny: one a built-in editor, and the verified one
                assert runs.count() == len(board.entries), runs.all_inner_texts()
                assert all(t.startswith("knowgic-tiny · ") for t in runs.all_inner_texts())
                view.keyboard.press("Escape")
                view.screenshot(path=str(artifacts / f"{size}-compare-unchosen.png"))
    finally:
        context.close()
    assert dialogs == []


@SIZES
def test_tables_keep_words_whole_and_intervals_in_view(
    site, browser, finished_job, artifacts, viewport
) -> None:
    """Every table of every tab: no word of a header (nor of a ranking or queue cell) broken over two
    lines; each metric's interval inside its cell, under its value on a phone (beside it at 1400), and the
    first metric column whole on the screen."""
    board, url = site
    size = f"{viewport['width']}x{viewport['height']}"
    context, view, dialogs = _page(browser, viewport)
    try:
        view.goto(url)
        wait_status(view, r"(^|\n)10 result")
        view.locator("#kg-table [role=row].virtual-row").nth(9).wait_for()
        metrics = view.evaluate(METRIC_BOXES)
        assert len(metrics) >= 10 * len(HEADLINE_HEADERS[2:]), len(metrics)
        first_column = min(m["col"] for m in metrics)
        for m in metrics:
            value, interval, shown, cell = m["value"], m["interval"], m["shown"], m["cell"]
            assert interval is not None, m  # every headline value of the fixture's runs has one
            assert cell["left"] - 0.5 <= shown["left"] and shown["right"] <= cell["right"] + 0.5, (
                m
            )  # nothing cut
            if viewport is PHONE:
                assert interval["top"] >= value["bottom"] - 1, m  # under the value
            else:
                assert interval["top"] < value["bottom"], m  # beside it
            if m["col"] == first_column:
                assert cell["right"] <= viewport["width"], m  # rank, editor and IFR fit the screen
        assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []

        open_tab(view, "Queue")
        view.locator("#kg-queue [role=row].virtual-row", has_text="finished").first.wait_for()
        assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []
        view.screenshot(path=str(artifacts / f"{size}-queue-words.png"))
        open_tab(view, "About")
        view.locator("#kg-about th").first.wait_for()
        assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []

        view.goto(f"{url}?result={board.entries['rome']}")
        view.locator("#kg-chains [role=row].virtual-row").first.wait_for()
        view.locator("#kg-per-edit [role=row].virtual-row").first.wait_for()
        assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []
        view.goto(f"{url}?a={board.entries['none']}&b={board.entries['rome']}")
        view.locator("#kg-compare-edits [role=row].virtual-row").first.wait_for()
        assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []
    finally:
        context.close()
    assert dialogs == []


@SIZES
def test_a_plugin_editor_shows_its_class_name_and_the_whole_name_on_hover(
    site, browser, artifacts, tmp_path, viewport
) -> None:
    board, url = site
    run = renamed_run(board.runs["rome"], tmp_path / "plugin", editor=PLUGIN_EDITOR)
    context, view, dialogs = _page(browser, viewport)
    try:
        with Stored(board, {"plug-in run": run}) as entries:
            view.goto(url)
            wait_status(view, r"(^|\n)11 result")
            link = view.locator(f"#kg-table a.kg-editor[href='?result={entries['plug-in run']}']")
            link.wait_for()
            assert link.inner_text() == "RankOneFT"
            assert link.get_attribute("title").startswith(f"{PLUGIN_EDITOR} · ")
            assert link.evaluate("e => e.getClientRects().length") == 1, "the name takes more than one line"
            assert view.evaluate(BROKEN_WORDS, WORDS_CHECKED) == []
            view.screenshot(path=str(artifacts / f"{viewport['width']}x{viewport['height']}-plugin.png"))
    finally:
        context.close()
    assert dialogs == []


# -- names are text (a results file's names never become elements) -----------------------------------------

IMG = "<img src=x onerror=alert(1)>"
LINK = "[link](http://example.invalid)"
IMAGE = "![i](http://example.invalid/a.png)"
BOLD = "**bold** _em_"
MARKUP_MODEL = f"{IMG} {BOLD} {LINK}"
# Editor names fit a cell (24 characters), so that the cell shows each whole.
MARKUP_EDITORS = {"a": "![i](http://x.invalid/a)", "b": "<b>b</b> **bold** [l](x)"}
# An element made from one of the names: an image or link to their addresses, emphasis of their words.
MADE_FROM_NAMES = """() => [
  ...document.querySelectorAll("img[src='x'], img[src*='invalid'], a[href*='invalid'], a[href='x']"),
  ...[...document.querySelectorAll('strong, em, b')].filter(e => ['bold', 'em', 'b', 'bold em'].includes(e.textContent.trim())),
].map(e => e.outerHTML)"""


def choose_listed(page, elem_id: str, text: str, timeout: float = 120.0) -> None:
    """Pick the option of a drop-down holding ``text``, once the page lists it (choices that follow the
    store arrive with the page's timer, while a list already open keeps the choices it opened with)."""
    import time

    deadline = time.monotonic() + timeout
    option = page.locator(f"#{elem_id} [role=option]", has_text=text).first
    while True:
        page.locator(f"#{elem_id} input").first.click()
        try:
            option.click(timeout=2000)
            break
        except Exception:  # not listed yet: close the list and look again
            page.keyboard.press("Escape")
            assert time.monotonic() < deadline, f"{text!r} never listed in #{elem_id}"
            page.wait_for_timeout(1000)
    page.keyboard.press("Escape")


def test_names_with_markup_stay_text_everywhere(site, browser, artifacts, tmp_path) -> None:
    """Runs whose model and editor names hold HTML, Markdown links, images and emphasis: chosen in every
    view (the ranking and its status line, the table, a result, a comparison, the plots, the About page),
    no element is made from them, no address in them is fetched, and they show as the characters they are."""
    board, url = site
    runs = {
        f"markup {key}": renamed_run(
            board.runs[source], tmp_path / key, model=MARKUP_MODEL, editor=MARKUP_EDITORS[key]
        )
        for key, source in (("a", "rome"), ("b", "none"))
    }
    context, view, dialogs = _page(browser, WIDE)
    fetched: list[str] = []
    view.on(
        "request", lambda r: fetched.append(r.url) if "invalid" in r.url or r.url.endswith("/x") else None
    )

    def nothing_made(where: str) -> None:
        assert view.evaluate(MADE_FROM_NAMES) == [], where

    try:
        with Stored(board, runs) as entries:
            view.goto(url)
            wait_status(view, r"(^|\n)10 result")
            # The ranking of the markup model, chosen in its selector by its name.
            choose_listed(view, "kg-model", MARKUP_MODEL)
            status = wait_status(view, r"(^|\n)2 result")
            assert f"2 result(s) of {MARKUP_MODEL}" in status, status
            assert sorted(table_column(view, "Editor")) == sorted(MARKUP_EDITORS.values())
            nothing_made("the ranking")
            view.screenshot(path=str(artifacts / "markup-1-ranking.png"), full_page=True)

            # A result, opened by a click on its row (its rank: the editor is a link, which loads the page
            # anew): its header names model, editor and label.
            row = view.locator("#kg-table [role=row].virtual-row", has_text=MARKUP_EDITORS["a"])
            row.locator("[data-col='0']").click()
            header = view.locator("#kg-detail-header")
            header.locator("h3").wait_for()
            assert header.locator("h3").inner_text() == f"{MARKUP_MODEL} · {MARKUP_EDITORS['a']}"
            assert "label: markup a" in header.inner_text()
            view.locator("#kg-heatmap svg.main-svg").first.wait_for()
            nothing_made("a result")
            view.screenshot(path=str(artifacts / "markup-2-result.png"), full_page=True)

            # A comparison of the two runs, chosen in the Compare tab's lists.
            open_tab(view, "Compare")
            choose(view, "kg-compare-model", MARKUP_MODEL)
            for side in ("a", "b"):
                view.locator(f"#kg-compare-{side} input").first.click()
                view.locator(f"#kg-compare-{side} [role=option]", has_text=entries[f"markup {side}"]).click()
                view.keyboard.press("Escape")
            view.locator("#kg-compare-button").click()
            message = view.locator("#kg-compare-message")
            message.get_by_text("Deep-editing score").first.wait_for()
            assert f"A = {MARKUP_MODEL} · {MARKUP_EDITORS['a']}" in message.inner_text()
            nothing_made("a comparison")

            # The plots of the ranking's model: title, legend and hover texts.
            open_tab(view, "Plots")
            figure = view.locator("#kg-tradeoff")
            figure.locator("g.legend").wait_for()
            legend = figure.locator("g.legend").text_content()
            assert all(f"{editor} (local)" in legend for editor in MARKUP_EDITORS.values()), legend
            assert MARKUP_MODEL in figure.locator(".gtitle").text_content()
            view.locator("#kg-lengths svg.main-svg").first.wait_for()
            nothing_made("the plots")
            view.screenshot(path=str(artifacts / "markup-3-plots.png"), full_page=True)

            open_tab(view, "About")
            view.locator("#kg-about th").first.wait_for()
            nothing_made("the About page")
    finally:
        context.close()
    assert dialogs == [], f"a script ran in the page: {dialogs}"
    assert fetched == [], f"the page fetched addresses from names: {fetched}"
