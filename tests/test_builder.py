"""The graph builder (``knowgic build``): each stage on small fixtures and on knowgic-tiny, resumption,
the review page through gradio_client, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import networkx as nx
import pytest

from knowgic.builder import review as rv
from knowgic.builder.generation import Generator, check_answers, parse_constrained
from knowgic.builder.graph import EditSpec, build_graph, chains_for_edits, enumerate_chains, sample_chains
from knowgic.builder.match import EntityMatcher, map_relation, similar_relations
from knowgic.builder.pipeline import Build, BuildConfig, ReviewPending, run_build
from knowgic.builder.seeds import (
    Template,
    counterfactual,
    read_templates,
    seeds_from_file,
    seeds_from_version,
)
from knowgic.builder.segment import segment_text
from knowgic.builder.spec import JUDGE_SCHEMA, load_builder_spec
from knowgic.errors import KnowgicError
from knowgic.models.base import LoadedModel

DATA = Path(__file__).parent / "data" / "builder"
SEEDS, TEMPLATES = DATA / "seeds.csv", DATA / "templates.yaml"


def _fact(s: str, p: str, a: str, graphs: tuple[str, ...] = ("g",)) -> dict:
    from knowgic.dataset.derive import fact_id

    return {"fact_id": fact_id(s, p, a), "subject": s, "prompt": p, "answer": a, "graphs": list(graphs)}


# --- segmentation, matching, paths ------------------------------------------------------------------


def test_segmentation_keeps_abbreviations_and_splits_sentences() -> None:
    text = "Dr. Watson met Mr. Holmes at 221B Baker St. in London. They solved cases together. Holmes"
    assert segment_text(text) == [
        "Dr. Watson met Mr. Holmes at 221B Baker St. in London.",
        "They solved cases together.",
        "Holmes",
    ]
    assert segment_text("   ") == []


def test_entity_matching_to_nodes_and_aliases() -> None:
    nodes = ["Harry Potter", "Harry Dresden", "Hogwarts School of Witchcraft and Wizardry", "Bill Clinton"]
    aliases = {
        "Bill Clinton": ["William Jefferson Clinton"],
        "Hogwarts School of Witchcraft and Wizardry": ["Hogwarts"],
    }
    m = EntityMatcher.build(nodes, aliases, cutoff=90)
    assert m.match("harry potter") == ("Harry Potter", 100.0)
    assert m.match("Harry potter") == ("Harry Potter", 100.0)
    assert m.match("Harry Poter")[0] == "Harry Potter"  # a spelling variant, whole string
    assert m.match("hogwarts")[0] == "Hogwarts School of Witchcraft and Wizardry"  # from the alias table
    assert m.match("William Jefferson Clinton")[0] == "Bill Clinton"
    assert m.match("Harry") == ("Harry", None)
    assert m.match("Zeus") == ("Zeus", None)
    # the published alias table (aliases.json of 1.1.0)
    facts, _templates, _edits, published = seeds_from_version("1.1.0")
    m = EntityMatcher.build(sorted({f.answer for f in facts} | {f.subject for f in facts}), published, 90)
    assert m.match("Aidan Mezvinsky")[0] == "Aidan Clinton Mezvinsky"
    assert m.match("William H. Gates")[0] == "Bill Gates"


def test_entity_matching_never_merges_a_name_into_a_part_of_it() -> None:
    m = EntityMatcher.build(
        ["Harry Potter", "Microsoft", "Hogwarts School of Witchcraft and Wizardry"], {}, 90
    )
    assert m.match("Harry Potter and the Goblet of Fire") == ("Harry Potter and the Goblet of Fire", None)
    assert m.match("Microsoft Windows") == ("Microsoft Windows", None)
    assert m.match("Hogwarts") == ("Hogwarts", None)  # no alias lists it: a node of its own
    m.add("Microsoft Windows")
    assert m.match("microsoft windows") == ("Microsoft Windows", 100.0)


def test_relation_mapping_and_similar_relations() -> None:
    def t(prompt: str) -> Template:
        return Template(prompt, prompt, "What about {}?", "version")

    templates = {p: t(p) for p in ("{} studied at", "{}'s schoolmate is", "{} is the father of")}
    assert map_relation("studied at", templates, 90)[0].prompt == "{} studied at"
    assert map_relation("'s schoolmate is", templates, 90)[0].prompt == "{}'s schoolmate is"
    assert map_relation("is father of", templates, 90)[0].prompt == "{} is the father of"
    assert map_relation("was born in", templates, 90) == (None, None)
    assert map_relation("is the mother of", templates, 90) == (None, None)
    similar = similar_relations(["{} has grandchild", "{} has a grandchild", "{} studied at"], 90)
    assert similar["{} has grandchild"] == ["{} has grandchild", "{} has a grandchild"]


def test_relation_matching_never_maps_a_short_phrase_to_a_longer_template() -> None:
    prompts = ("{} is the grandson of", "{} is a Member of Parliament in", "{}'s schoolmate is")
    templates = {p: Template(p, p, "What about {}?", "version") for p in prompts}
    assert map_relation("is", templates, 90) == (None, None)
    assert map_relation("is a member of", templates, 90) == (None, None)
    assert map_relation("schoolmate", templates, 90) == (None, None)
    similar = similar_relations(
        ["{} was created at", "{} was created by", "{} worked in", "{} worked on"], 90
    )
    assert all(v == [k] for k, v in similar.items())


def test_path_enumeration_with_cycles_and_a_cap() -> None:
    # A -> B -> C -> T, A -> C, B <-> A (a cycle), C -> B (another), and two relations A -> T
    facts = [
        _fact("A", "{} r1", "B"),
        _fact("B", "{} r1", "A"),
        _fact("B", "{} r2", "C"),
        _fact("C", "{} r1", "B"),
        _fact("A", "{} r3", "C"),
        _fact("C", "{} r4", "T"),
        _fact("A", "{} r5", "T"),
        _fact("A", "{} r6", "T"),
    ]
    g = build_graph(facts)
    paths, truncated = enumerate_chains(g, "A", "T", max_steps=5, limit=100)
    assert not truncated
    names = {tuple(g.edges[u, v]["fact"]["prompt"] for u, v in _edges(g, p)) for p in paths}
    # one link between two nodes: r5 and r6 (A -> T) are one edge, r5 posing it (ties by fact id)
    posed = g.edges["A", "T"]["fact"]["prompt"]
    assert {posed} | {a["prompt"] for a in g.edges["A", "T"]["aliases"]} == {"{} r5", "{} r6"}
    assert names == {(posed,), ("{} r3", "{} r4"), ("{} r1", "{} r2", "{} r4")}
    for p in paths:  # simple: no node twice
        nodes = [e[0] for e in _edges(g, p)] + ["T"]
        assert len(nodes) == len(set(nodes))
    assert enumerate_chains(g, "A", "T", max_steps=1, limit=100)[0] == [p for p in paths if len(p) == 1]
    assert enumerate_chains(g, "A", "T", max_steps=5, limit=2) == (paths[:2], True)
    first, again = sample_chains(paths, 2, seed=0, edit_id="e"), sample_chains(paths, 2, seed=0, edit_id="e")
    assert first == again and len(first) == 2 and set(first) <= set(paths)
    assert {tuple(x) for s in range(20) for x in sample_chains(paths, 2, seed=s, edit_id="e")} == set(paths)
    edit = EditSpec("e", "A", "{} r5", "T", "X", "drawn", ("g",))
    out = chains_for_edits(facts, [edit], "global", 5, 2, 100, 0)
    assert out["edits"][0]["paths_found"] == 3 and len(out["edits"][0]["chains"]) == 2
    assert len({tuple(c) for c in out["edits"][0]["chains"]}) == 2  # deduplicated
    assert out["merged_phrasings"] and out["edges"] == 7


def test_phrasing_variants_merge_into_one_edge_posed_by_the_best_known() -> None:
    """ "{} is father of" and "{} is the father of" between the same two nodes are one edge: its chains
    are no phrasing variants of each other, and the edge is posed by the phrasing the model scores best."""
    weak = {**_fact("A", "{} is father of", "B"), "validation": {"p": 0.2}}
    strong = {**_fact("A", "{} is the father of", "B"), "validation": {"p": 0.6}}
    step = {**_fact("B", "{} lives in", "T"), "validation": {"p": 0.5}}
    g = build_graph([weak, strong, step])
    assert isinstance(g, nx.DiGraph) and not g.is_multigraph()
    assert g.edges["A", "B"]["fact"]["fact_id"] == strong["fact_id"]
    assert [a["fact_id"] for a in g.edges["A", "B"]["aliases"]] == [weak["fact_id"]]
    edit = EditSpec("e", "A", "{} lives in", "T", "X", "drawn", ("g",))
    out = chains_for_edits([weak, strong, step], [edit], "global", 5, 0, 100, 0)
    assert out["edits"][0]["chains"] == [[strong["fact_id"], step["fact_id"]]]
    assert out["merged_phrasings"] == {weak["fact_id"]: strong["fact_id"]}


def test_family_cap_shares_a_family_evenly_between_its_edits() -> None:
    from knowgic.builder.graph import fair_shares

    assert fair_shares([10, 2, 7], 9) == [4, 2, 3]
    assert fair_shares([10, 2, 7], 0) == [10, 2, 7] and fair_shares([1, 1], 5) == [1, 1]
    # family 1: A -> {B1..B4} -> T, A -> T; family 2: C -> D -> U, C -> U
    facts = [_fact("A", "{} r", f"B{i}") for i in range(4)] + [_fact(f"B{i}", "{} r", "T") for i in range(4)]
    facts += [
        _fact("A", "{} s", "T"),
        _fact("C", "{} r", "D"),
        _fact("D", "{} r", "U"),
        _fact("C", "{} s", "U"),
    ]
    edits = [
        EditSpec("e1", "A", "{} s", "T", "X", "drawn", ("g",)),
        EditSpec("e2", "C", "{} s", "U", "Y", "drawn", ("g",)),
    ]
    out = chains_for_edits(facts, edits, "global", 5, 0, 100, 0, family_cap=3)
    assert [e["paths_found"] for e in out["edits"]] == [5, 2]
    assert [len(e["chains"]) for e in out["edits"]] == [3, 2]
    assert out["family_chains"] == {"A": 3, "C": 2}


def _edges(g: nx.DiGraph, path: tuple[str, ...]) -> list[tuple[str, str]]:
    by_fact = {d["fact"]["fact_id"]: (u, v) for u, v, d in g.edges(data=True)}
    return [by_fact[k] for k in path]


def test_graph_scope_walks_only_the_edits_own_graph() -> None:
    facts = [
        _fact("A", "{} r", "B", ("g1",)),
        _fact("B", "{} r", "T", ("g2",)),
        _fact("A", "{} s", "T", ("g1",)),
    ]
    edit = EditSpec("g1", "A", "{} s", "T", "X", "published", ("g1",))
    assert len(chains_for_edits(facts, [edit], "graph", 5, 0, 100, 0)["edits"][0]["chains"]) == 1
    assert len(chains_for_edits(facts, [edit], "global", 5, 0, 100, 0)["edits"][0]["chains"]) == 2


def test_counterfactual_is_seeded_and_never_gold() -> None:
    fact = _fact("A", "{} r", "B")
    picks = {counterfactual(fact, ["B", "C", "D", "A"], {"B"}, seed=s) for s in range(30)}
    assert picks == {"C", "D"}
    assert counterfactual(fact, ["B", "C", "D"], {"B"}, 7) == counterfactual(fact, ["D", "C"], {"B"}, 7)
    assert counterfactual(fact, ["B", "A"], {"B"}, 0) is None


# --- JSON-constrained generation ------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_loaded(random_gpt2) -> LoadedModel:
    model, tok = random_gpt2
    return LoadedModel(model, tok, "random-gpt2", "0" * 64, "gpt2", "float32", "cpu")


def test_constrained_extraction_is_schema_valid_json(random_loaded: LoadedModel) -> None:
    """A random model's output, constrained, is JSON of the extraction schema (nothing parsed by regex)."""
    spec = load_builder_spec()
    schema = spec.extraction_schema()
    gen = Generator(random_loaded, batch_size=2)
    outs = gen.generate(
        ["Sentence: Harry Potter studied at Hogwarts.\nJSON:", "Sentence: Paris.\nJSON:"], 120, schema
    )
    assert len(outs) == 2
    for out in outs:
        value, error = parse_constrained(out)
        if error is None:
            jsonschema.validate(value, schema)
        else:  # only a token budget can cut it short
            assert out.lstrip().startswith("{")
    verdicts = gen.generate(["Fact: A | b | C\nVerdict:"], 80, JUDGE_SCHEMA)
    value, error = parse_constrained(verdicts[0])
    assert error is None and value["verdict"] in ("accept", "reject")


def test_a_model_that_answers_nothing_is_one_line() -> None:
    with pytest.raises(KnowgicError, match="answered nothing to any of 3 prompts"):
        check_answers(["", " ", "\n"], "chain-of-thought expansion", "m")
    check_answers(["", "a"], "x", "m")


# --- seeds: bad input -----------------------------------------------------------------------------


def test_seed_file_errors_are_one_line(tmp_path: Path) -> None:
    templates = read_templates(TEMPLATES)
    bad = tmp_path / "seeds.csv"
    bad.write_text("subject,relation\nA,schoolmate\n", encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"missing column\(s\) object") as exc:
        seeds_from_file(bad, templates)
    assert "\n" not in str(exc.value)
    bad.write_text("subject,relation,object\nA,schoolmate,B\nC,teaches,D\n", encoding="utf-8")
    with pytest.raises(KnowgicError, match=r"row 2: unknown relation 'teaches'"):
        seeds_from_file(bad, templates)
    broken = tmp_path / "t.yaml"
    broken.write_text("r:\n  prompt: no placeholder\n  question: 'Who {}?'\n", encoding="utf-8")
    with pytest.raises(KnowgicError, match="prompt must be a string with one"):
        read_templates(broken)


def test_cli_bad_seed_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "seeds.csv"
    bad.write_text("subject,object\nA,B\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "build", "--model", "knowgic-tiny", "--seeds", str(bad),
         "--templates", str(TEMPLATES), "--build-dir", str(tmp_path / "b")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert (
        lines[-1] == f"error: {bad}: missing column(s) relation (a seed file needs subject, relation, object)"
    )
    assert "Traceback" not in proc.stderr and sum(line.startswith("error") for line in lines) == 1


def test_build_help_works() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "build", "--help"], capture_output=True, text=True, check=True
    )
    assert "--judge" in proc.stdout and "knowgic[build]" in proc.stdout


# --- review ---------------------------------------------------------------------------------------


def _grown(*facts: tuple[str, str, str]) -> dict:
    cands = []
    for s, r, a in facts:
        f = _fact(s, "{} " + r, a)
        cands.append(
            {**f, "relation": r, "question": f"What {r} {s}?", "validation": {"p": 0.5, "known": True},
             "sources": [{"sentence": f"{s} {r} {a}.", "extracted": {}}], "origin": "extracted"}
        )  # fmt: skip
    templates = [
        {"relation": r, "prompt": "{} " + r, "question": "What {} " + r + "?"} for r in {f[1] for f in facts}
    ]
    return {"candidates": cands, "proposed_templates": templates, "counts": {"triplets": len(cands)}}


def _cfg(tmp_path: Path, **kw) -> BuildConfig:
    return BuildConfig(model="knowgic-tiny", build_dir=tmp_path / "build", seeds_file=SEEDS,
                       templates_file=TEMPLATES, progress=False, **kw)  # fmt: skip


def test_review_resumes_without_losing_decisions(tmp_path: Path) -> None:
    """A build stopped at review keeps every decision when it runs again with more candidates."""
    build = Build(_cfg(tmp_path))
    grown = _grown(("A", "knows", "B"), ("B", "knows", "C"))
    with pytest.raises(ReviewPending, match="3 review decisions pending"):
        build.review(grown)
    path = tmp_path / "build" / rv.REVIEW_FILE
    rows = rv.read_review(path)
    rv.decide(rows, grown["candidates"][0]["fact_id"], "accept", "person:ann")
    rv.decide(rows, "template:knows", "edit", "person:ann", {"question": "Whom does {} know?"})
    rv.write_review(path, rows)
    more = _grown(("A", "knows", "B"), ("B", "knows", "C"), ("C", "knows", "D"))
    with pytest.raises(ReviewPending, match="2 review decisions pending"):
        Build(_cfg(tmp_path)).review(more)
    rows = rv.read_review(path)
    first = next(r for r in rows if r["id"] == grown["candidates"][0]["fact_id"])
    assert (first["decision"], first["by"]) == ("accept", "person:ann")
    for r in rv.pending(rows):
        rv.decide(rows, r["id"], "reject", "person:bob")
    rv.write_review(path, rows)
    final = Build(_cfg(tmp_path)).review(more)
    facts, templates = rv.accepted(final)
    assert templates == {"knows": {"prompt": "{} knows", "question": "Whom does {} know?"}}
    assert next(iter(facts.values()))["question"] == "Whom does A know?"
    assert next(iter(facts.values()))["by"] == "person:ann"
    # dropping a candidate keeps its decision, inactive
    Build(_cfg(tmp_path)).review(_grown(("B", "knows", "C"), ("C", "knows", "D")))
    stale = next(r for r in rv.read_review(path) if r["id"] == grown["candidates"][0]["fact_id"])
    assert stale["active"] is False and stale["decision"] == "accept"


def test_review_csv_round_trip(tmp_path: Path) -> None:
    rows = rv.merge_review(
        [], *(lambda g: (g["candidates"], g["proposed_templates"]))(_grown(("A", "knows", "B")))
    )
    out = tmp_path / "r.csv"
    rv.export_csv(rows, out)
    text = out.read_text(encoding="utf-8").replace(",pending,", ",accept,")
    out.write_text(text.replace("A,knows", "Alice,knows", 1), encoding="utf-8")
    assert rv.import_csv(rows, out, "person:csv") == 2
    fact = next(r for r in rows if r["kind"] == "fact")
    assert (
        fact["decision"] == "edit" and fact["edited"] == {"subject": "Alice"} and fact["by"] == "person:csv"
    )


def test_review_page_through_gradio_client(tmp_path: Path) -> None:
    from gradio_client import Client

    from knowgic.builder.review_app import KEYS, make_app
    from tests.test_leaderboard import free_port

    path = tmp_path / rv.REVIEW_FILE
    g = _grown(("A", "knows", "B"), ("B", "knows", "C"))
    rv.write_review(path, rv.merge_review([], g["candidates"], g["proposed_templates"]))
    app = make_app(path, "person:pat")
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, js=KEYS)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        index, status, rid, *_ = client.predict(-1, api_name="/show")
        assert "3 pending" in status and rid == "template:knows"
        view = client.predict(index, rid, "", "", "", "", api_name="/accept_row")
        assert "2 pending" in view[1]
        view = client.predict(view[0], view[2], "A", "{} knows", "Bea", "", api_name="/edit_row")
        view = client.predict(view[0], view[2], "", "", "", "", api_name="/reject_row")
        assert "0 pending" in view[1]
    finally:
        app.close()
    rows = {r["id"]: r for r in rv.read_review(path)}
    assert rows["template:knows"]["decision"] == "accept"
    assert rows[g["candidates"][0]["fact_id"]]["edited"] == {"answer": "Bea"}
    assert rows[g["candidates"][1]["fact_id"]]["decision"] == "reject"
    assert {r["by"] for r in rows.values()} == {"person:pat"}


# --- whole builds on knowgic-tiny -------------------------------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "build.json"
    }


def test_resumed_build_equals_uninterrupted(tmp_path: Path) -> None:
    """Stopped after each stage in turn and run again, a build writes the same folder as one run."""
    whole = run_build(_cfg(tmp_path / "one", out=tmp_path / "one-out"))
    assert whole.counts["chains"] >= 1 and not whole.skipped
    cfg = _cfg(tmp_path / "two", out=tmp_path / "two-out")
    for stop in ("seeds", "query_validation", "expand", "extract"):
        cfg.stop_after = stop
        partial = run_build(cfg)
        assert (partial.ran[-1] == stop and partial.ran[0] != "seeds") or stop == "seeds"
    cfg.stop_after = None
    resumed = run_build(cfg)
    assert "seeds" in resumed.skipped and "expand" in resumed.skipped
    assert _files(tmp_path / "one-out") == _files(tmp_path / "two-out")
    again = run_build(_cfg(tmp_path / "two", out=tmp_path / "two-out", overwrite=True))
    assert again.ran == []  # nothing changed: every stage cached
    record = json.loads((tmp_path / "two-out" / "build" / "build.json").read_text(encoding="utf-8"))
    assert record["model"]["id"] == "knowgic-tiny" and record["prompts"]["cot"]
    # every fact traces to its origin and decision
    prov = [
        json.loads(x) for x in (tmp_path / "two-out" / "build" / "provenance.jsonl").read_text().splitlines()
    ]
    assert prov and all(p["review"]["by"] and "p" in p["validation"] for p in prov)


def test_interrupted_stage_resumes_from_its_journal(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, stop_after="expand")
    run_build(cfg)
    journal = next((tmp_path / "build" / "stages").glob("expand.journal.jsonl"))
    lines = journal.read_text(encoding="utf-8").splitlines()
    # a killed run: the manifest lost the stage, the journal kept two items and half a line
    manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
    del manifest["expand"]
    (tmp_path / "build" / "manifest.json").write_text(json.dumps(manifest))
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10], encoding="utf-8")
    run_build(_cfg(tmp_path, stop_after="expand"))
    after = [
        json.loads(x)
        for x in journal.read_text(encoding="utf-8").splitlines()[2:]
        if x.startswith("{") and x.endswith("}")
    ]
    redone = {r["item"] for r in after}
    kept = {json.loads(x)["item"] for x in lines[:2]}
    assert redone.isdisjoint(kept) and len(redone) == len(lines) - 2


def test_built_folder_validates_loads_and_evaluates(tmp_path: Path) -> None:
    import datasets

    from knowgic.dataset.validate import validate_path
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    out = tmp_path / "out"
    run_build(_cfg(tmp_path, out=out, expand=False))
    report = validate_path(out)
    assert report.ok, report.render_text()
    rows = datasets.load_dataset(str(out), "chains", split="test")
    assert len(rows) >= 1 and rows[0]["chain"]["subjects"][0] == rows[0]["requested_rewrite"][0]["subject"]
    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", dataset_version=str(out)), progress=False
    )
    ds = run.document["dataset"]
    assert ds["name"] == "knowgic-build" and ds["version"] == "0.1.0"
    assert run.document["counts"]["chains"] == len(rows)


def test_evaluate_refuses_a_tampered_folder(tmp_path: Path) -> None:
    from knowgic.dataset.folder import open_dataset

    out = tmp_path / "out"
    run_build(_cfg(tmp_path, out=out, expand=False))
    data = out / "data" / "chains-test.jsonl"
    data.write_text(data.read_text(encoding="utf-8").replace('"case_id":0', '"case_id":7'), encoding="utf-8")
    with pytest.raises(KnowgicError, match="content hash mismatch"):
        open_dataset(out)


@pytest.mark.slow
def test_round_trip_reproduces_the_published_chains(tmp_path: Path) -> None:
    """From 1.1.0's own facts on knowgic-tiny: every published chain whose facts the model knows comes
    back, and every chain that does not has a fact the model does not know."""
    from knowgic.builder.compare import compare

    out = tmp_path / "rt"
    run_build(BuildConfig(model="knowgic-tiny", build_dir=tmp_path / "b", out=out, source="1.1.0", expand=False,
                          max_chains_per_edit=0, progress=False))  # fmt: skip
    result = compare(out, "1.1.0", tmp_path / "b")
    assert result["reproduced"] >= 1100
    # every published chain that did not come back has a fact the model does not know
    assert set(result["missing_reasons"]) <= {
        "has a fact the model does not know",
        "has a fact dropped by the final check",
    }
    shutil.rmtree(out)


def test_cli_build_then_review_export(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "build", "--model", "knowgic-tiny", "--seeds", str(SEEDS),
         "--templates", str(TEMPLATES), "--build-dir", str(tmp_path / "b"), "--out", str(out), "--no-expand",
         "--max-seeds", "8", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["counts"]["seed_facts"] == 8 and result["counts"]["chains"] >= 1
    assert (out / "version.json").is_file()
    proc = subprocess.run(
        [sys.executable, "-m", "knowgic.cli", "review", str(tmp_path / "b"), "--export", str(tmp_path / "r.csv")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "does not exist: run knowgic build" in proc.stderr


# --- the paper's loop: the prompt, reviewers' facts, chain questions ----------------------------------


def test_chain_of_thought_prompt_asks_without_the_answer() -> None:
    from knowgic.builder.expand import cot_prompt

    spec = load_builder_spec()
    fact = {"question": "Where did Harry Potter study?", "answer": "Hogwarts", "subject": "Harry Potter"}
    for chat in (False, True):
        text = cot_prompt(spec, fact, chat)
        assert "Where did Harry Potter study?" in text and "Hogwarts" not in text


def test_reviewer_adds_a_fact_that_stays_through_merges(tmp_path: Path) -> None:
    g = _grown(("A", "knows", "B"))
    rows = rv.merge_review([], g["candidates"], g["proposed_templates"])
    row = rv.add_fact(rows, "B", "{} lives in", "Paris", "Where does {} live?", "person:ann")
    assert row["question"] == "Where does B live?" and row["decision"] == "accept"
    with pytest.raises(KnowgicError, match="one \\{\\}"):
        rv.add_fact(rows, "B", "lives in", "Paris", "Where does {} live?", "person:ann")
    rows = rv.merge_review(rows, [], [])  # a rerun whose candidates all went away keeps the added fact
    assert next(r for r in rows if r["id"] == row["id"])["active"] is True
    (added,) = rv.added(rows)
    assert (added["subject"], added["prompt"], added["answer"], added["origin"]) == (
        "B",
        "{} lives in",
        "Paris",
        "added",
    )
    assert rv.summary(rows)["added"]["accept"] == 1
    out = tmp_path / "r.csv"
    rv.export_csv(rows, out)
    with out.open("a", encoding="utf-8") as fh:
        fh.write(",added,C,,{} lives in,Where does {} live?,Rome,,accept,\n")
    assert rv.import_csv(rows, out, "person:csv") >= 1
    assert {a["subject"] for a in rv.added(rows)} == {"B", "C"}


def test_chain_question_asks_for_the_last_answer_through_the_chain() -> None:
    from knowgic.builder.refine import chain_question, reworded

    spec = load_builder_spec()
    steps = [
        {"subject": "Harry Potter", "question": "Who is Harry Potter's schoolmate?"},
        {"subject": "Ron Weasley", "question": "Where did Ron Weasley study?"},
    ]
    assert (
        chain_question(spec, steps) == 'Where did the answer to "Who is Harry Potter\'s schoolmate?" study?'
    )
    fact = {"subject": "Ron Weasley", "prompt": "{} studied at", "question": "Where did Ron Weasley study?"}
    forms = reworded(spec, fact, 2)
    assert forms == ["Q: Where did {} study?\nA:", "Question: Where did {} study?\nAnswer:"]
    assert reworded(spec, fact, 0) == []
