"""The build, stage by stage; each stage is skipped when its inputs and settings did not change.

    1 seeds ──> 2 query_validation ──> 3 expand ─> segment ─> extract ─> match ──> 4 triplet_validation
                                                                                        │
    7 output <── 6 graph <── edits (published, or drawn from every fact) <── 5 review (file/page/judge)

Stage outputs live under the build folder (:mod:`knowgic.builder.store`); the review file is never
recomputed, only merged. Models load lazily: a rerun whose stages are all cached loads none.
"""

from __future__ import annotations

import getpass
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowgic.builder import review as rv
from knowgic.builder.graph import EditSpec, chains_for_edits, edge_facts
from knowgic.builder.match import similar_relations
from knowgic.builder.preflight import check_build
from knowgic.builder.seeds import (
    SeedEdit,
    Template,
    counterfactual,
    read_templates,
    seeds_from_file,
    seeds_from_version,
    to_rows,
)
from knowgic.builder.spec import BuilderSpec, load_builder_spec
from knowgic.builder.store import BuildStore, stage_key
from knowgic.builder.template_rules import TEMPLATES  # --extractor templates
from knowgic.dataset.derive import fact_id
from knowgic.dataset.io import file_sha256, sha256_text
from knowgic.errors import EXIT_REVIEW_PENDING, KnowgicError
from knowgic.records import EditRequest

SEED_SUBJECTS = ("all", "edits")
EDIT_MODES = ("published", "all")
SCOPES = ("graph", "global")
SPACY = "spacy"  # --extractor spacy: the dependency rules of knowgic.builder.spacy_rules


class ReviewPending(KnowgicError):
    """The build stopped at the review stage: decisions are missing (exit code 4)."""

    exit_code = EXIT_REVIEW_PENDING


@dataclass
class BuildConfig:
    model: str
    build_dir: Path
    out: Path | None = None
    source: str | None = None  # --from: a version name or a dataset folder
    seeds_file: Path | None = None
    templates_file: Path | None = None
    seed_subjects: str = "all"
    max_seeds: int | None = None  # the first N seed facts only (trial runs, benchmarks)
    edits: str = "published"
    scope: str | None = None  # default: graph for published edits, global for drawn ones
    expand: bool = True
    rounds: int | None = None  # growth rounds (default: the spec's defaults.rounds)
    extractor: str | None = None
    judge: str | None = None
    protocol: str | None = None
    name: str = "knowgic-build"
    version: str = "0.1.0"
    max_chains_per_edit: int | None = None
    max_steps: int | None = None
    seed: int | None = None
    batch_size: int | None = None
    dtype: str = "float32"
    device: str = "auto"
    reviewer: str = field(default_factory=lambda: getpass.getuser())
    progress: bool = True
    overwrite: bool = False
    stop_after: str | None = None  # tests and resumption checks: stop once this stage is done

    def check(self) -> None:
        if (self.source is None) == (self.seeds_file is None):
            raise KnowgicError("give exactly one of --from VERSION|FOLDER and --seeds FILE")
        if self.seeds_file is not None and self.templates_file is None:
            raise KnowgicError("--seeds needs --templates (a YAML of relation -> {prompt, question})")
        if self.seeds_file is not None and self.edits == "published":
            self.edits = "all"  # a seed file has no edit requests of its own
        for value, allowed, what in (
            (self.seed_subjects, SEED_SUBJECTS, "--seed-subjects"),
            (self.edits, EDIT_MODES, "--edits"),
        ):
            if value not in allowed:
                raise KnowgicError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        if self.scope is None:
            self.scope = "graph" if self.edits == "published" else "global"
        if self.scope not in SCOPES:
            raise KnowgicError(f"--scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")


@dataclass
class BuildResult:
    counts: dict[str, int]
    ran: list[str]
    skipped: list[str]
    out: Path | None
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)


class _Models:
    """Loads each model once, on first use."""

    def __init__(self, cfg: BuildConfig) -> None:
        self.cfg = cfg
        self.loaded: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name not in self.loaded:
            from knowgic.models.loading import load_model

            self.loaded[name] = load_model(
                name, dtype=self.cfg.dtype, device=self.cfg.device, progress=self.cfg.progress
            )
        return self.loaded[name]


def _log(cfg: BuildConfig, text: str) -> None:
    if cfg.progress:
        print(text, file=sys.stderr, flush=True)


class Build:
    def __init__(self, cfg: BuildConfig, spec: BuilderSpec | None = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.spec = spec or load_builder_spec()
        check_build(cfg, self.spec)  # every input, before the build folder is made
        d = self.spec.defaults
        self.protocol = cfg.protocol or str(d["protocol"])
        self.cap = (
            cfg.max_chains_per_edit if cfg.max_chains_per_edit is not None else int(d["max_chains_per_edit"])
        )
        self.max_steps = cfg.max_steps or int(d["max_chain_steps"])
        self.rounds = cfg.rounds if cfg.rounds is not None else int(d["rounds"])
        self.seed = cfg.seed if cfg.seed is not None else int(d["seed"])
        self.batch_size = cfg.batch_size or int(d["batch_size"])
        self.store = BuildStore(cfg.build_dir)
        self.models = _Models(cfg)
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.stage_seconds: dict[str, float] = {}
        self.revision = ""

    # --- the stage runner -------------------------------------------------------------------------

    def stage(self, name: str, config: dict[str, Any], inputs: list[str], work: Callable[[str], Any]) -> Any:
        key = stage_key(name, config, {i: self.store.digest(i) for i in inputs})
        cached = self.store.cached(name, key)
        if cached is not None:
            self.skipped.append(name)
            return cached
        _log(self.cfg, f"stage {name}")
        started = time.perf_counter()
        output = work(key)
        self.store.save(name, key, output)
        self.stage_seconds[name] = round(time.perf_counter() - started, 3)
        self.store.log_timing(name, self.stage_seconds[name])
        self.ran.append(name)
        if self.cfg.stop_after == name:
            raise _Stopped(name)
        return output

    def scorer(self) -> Any:
        from knowgic.scoring import make_scorer

        return make_scorer(self.protocol)

    def generator(self, model: str) -> Any:
        from knowgic.builder.generation import Generator

        return Generator(self.models.get(model), batch_size=self.batch_size)

    def models_is_chat(self) -> bool:
        """Whether the built model is a chat model (its registry entry says so, without loading it)."""
        from knowgic.models import registry

        entry = registry.get_offline_model(self.cfg.model)
        if entry is not None:
            return entry.is_chat
        return bool(self.models.get(self.cfg.model).is_chat)

    def model_config(self, model: str) -> dict[str, Any]:
        return {"model": model, "dtype": self.cfg.dtype}

    # --- stages -----------------------------------------------------------------------------------

    def seeds(self) -> dict[str, Any]:
        cfg = self.cfg
        config: dict[str, Any] = {"seed_subjects": cfg.seed_subjects, "edits": cfg.edits}
        if cfg.max_seeds is not None:
            config["max_seeds"] = cfg.max_seeds
        if cfg.source is not None:
            config["source"] = cfg.source
            path = Path(cfg.source)
            if path.is_dir():
                config["source_sha256"] = sha256_text((path / "version.json").read_text(encoding="utf-8"))
        else:
            config["seeds_sha256"] = file_sha256(cfg.seeds_file)  # type: ignore[arg-type]
            config["templates_sha256"] = file_sha256(cfg.templates_file)  # type: ignore[arg-type]

        def work(_key: str) -> dict[str, Any]:
            edits: list[SeedEdit] = []
            aliases: dict[str, list[str]] = {}
            if cfg.source is not None:
                facts, templates, edits, aliases = seeds_from_version(cfg.source)
            else:
                templates = read_templates(cfg.templates_file)  # type: ignore[arg-type]
                facts = seeds_from_file(cfg.seeds_file, templates)  # type: ignore[arg-type]
                for f in facts:
                    if f.aliases:
                        aliases.setdefault(f.answer, list(f.aliases))
            if cfg.seed_subjects == "edits":
                if not edits:
                    raise KnowgicError("--seed-subjects edits needs a source with edit requests (--from)")
                subjects = {e.subject for e in edits}
                facts = [f for f in facts if f.subject in subjects]
            if cfg.max_seeds is not None:
                facts = facts[: cfg.max_seeds]
            return {
                "facts": to_rows(facts),
                "templates": {k: asdict(v) for k, v in templates.items()},
                "edits": to_rows(edits),
                "aliases": aliases,
            }

        return self.stage("seeds", config, [], work)

    def refine_config(self) -> dict[str, Any]:
        return {"refine": self.spec.refine, "refine_attempts": int(self.spec.defaults["refine_attempts"])}

    def validate_facts(
        self, facts: list[dict[str, Any]], gold_from: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Facts scored by the known rule; the unknown ones asked again in reworded forms (refinement)."""
        from knowgic.builder.refine import refine_facts
        from knowgic.builder.validate import score_facts

        loaded, scorer = self.models.get(self.cfg.model), self.scorer()
        gold = gold_from if gold_from is not None else facts
        scored = score_facts(facts, loaded, scorer, gold_from=gold)
        attempts = int(self.spec.defaults["refine_attempts"])
        if attempts <= 0:
            return scored
        return refine_facts(scored, self.spec, attempts, loaded, scorer, gold)

    def query_validation(self, seeds: dict[str, Any]) -> list[dict[str, Any]]:
        def work(_key: str) -> dict[str, Any]:
            loaded = self.models.get(self.cfg.model)
            return {"revision": loaded.revision, "facts": self.validate_facts(seeds["facts"])}

        config = {**self.model_config(self.cfg.model), "protocol": self.protocol, **self.refine_config()}
        out = self.stage("query_validation", config, ["seeds"], work)
        self.revision = out["revision"]
        return out["facts"]

    def grow(
        self,
        seeds: dict[str, Any],
        frontier: list[dict[str, Any]],
        known: list[dict[str, Any]],
        round_no: int = 1,
        accepted_templates: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """One round of stages 3 and 4 (chain of thought, segmentation, extraction, matching, triplet
        validation) over the ``frontier`` facts, matched against every ``known`` fact so far. Round 1's
        stages are named plainly, round k's with ``.rk``."""
        from knowgic.builder.expand import expand
        from knowgic.builder.extract import extract
        from knowgic.builder.match import match
        from knowgic.builder.segment import segment

        d = self.spec.defaults
        suffix = "" if round_no == 1 else f".r{round_no}"
        before = ["query_validation"]
        facts_cfg: dict[str, Any] = {}
        if round_no > 1:  # what a later round grows from: the facts accepted so far, decided in review
            facts_cfg = {
                "frontier_sha256": sha256_text(rv.dumps(frontier)),
                "known_sha256": sha256_text(rv.dumps(known)),
            }
        cot_cfg = {
            **self.model_config(self.cfg.model),
            "cot": self.spec.cot,
            "max_new_tokens": d["cot_max_new_tokens"],
            **facts_cfg,
        }

        def do_expand(key: str) -> list[dict[str, Any]]:
            journal = self.store.journal("expand" + suffix, key)
            return expand(
                frontier,
                self.generator(self.cfg.model),
                self.spec,
                journal,
                int(d["cot_max_new_tokens"]),
                self.cfg.progress,
            )

        cots = self.stage("expand" + suffix, cot_cfg, before, do_expand)
        lead = not self.models_is_chat() and self.spec.cot["base"].rstrip().endswith("{subject}")
        sentences = self.stage(
            "segment" + suffix,
            {"segmenter": "pysbd/en", "repeats": "dropped", "lead_from_prompt": lead},
            ["expand" + suffix],
            lambda _k: segment(cots, lead),
        )
        extractor = self.cfg.extractor or self.cfg.model
        ex_cfg = {
            **self.model_config(extractor),
            "extraction": self.spec.extraction,
            "schema": self.spec.extraction_schema(),
            "max_new_tokens": d["extract_max_new_tokens"],
        }
        templates = {k: Template(**v) for k, v in seeds["templates"].items()}
        for t in accepted_templates or []:  # proposed templates a reviewer accepted in an earlier round
            templates.setdefault(
                t["relation"], Template(t["relation"], t["prompt"], t["question"], "proposed")
            )
        prompts = [t.prompt for t in templates.values()]
        if extractor == SPACY:
            from knowgic.builder.spacy_rules import extract_spacy, spacy_config

            ex_cfg = {"extractor": SPACY, **spacy_config(self.spec)}
        elif extractor == TEMPLATES:
            from knowgic.builder.template_rules import templates_config

            ex_cfg = templates_config(prompts, self.spec)

        def do_extract(key: str) -> list[dict[str, Any]]:
            if extractor == SPACY:
                return extract_spacy(sentences, self.spec)
            if extractor == TEMPLATES:
                from knowgic.builder.template_rules import extract_templates

                return extract_templates(sentences, prompts, self.spec)
            journal = self.store.journal("extract" + suffix, key)
            return extract(
                sentences,
                self.generator(extractor),
                self.spec,
                journal,
                int(d["extract_max_new_tokens"]),
                self.cfg.progress,
            )

        extractions = self.stage("extract" + suffix, ex_cfg, ["segment" + suffix], do_extract)
        match_cfg = {
            "entity_match_cutoff": d["entity_match_cutoff"],
            "relation_match_cutoff": d["relation_match_cutoff"],
            "new_relation": self.spec.new_relation,
            **facts_cfg,
        }
        if accepted_templates:
            match_cfg["accepted_templates"] = sorted(t["prompt"] for t in accepted_templates)

        def do_match(_key: str) -> dict[str, Any]:
            return match(
                extractions,
                {s["sentence_id"]: s for s in sentences},
                {c["cot_id"]: c for c in cots},
                known,
                templates,
                seeds["aliases"],
                self.spec,
            )

        matched = self.stage(
            "match" + suffix,
            match_cfg,
            ["extract" + suffix, "segment" + suffix, "expand" + suffix, *before],
            do_match,
        )

        def do_validate(_key: str) -> dict[str, Any]:
            cands = matched["candidates"]
            for c in cands:
                c["round"] = round_no
            return {**matched, "candidates": self.validate_facts(cands, gold_from=known + cands)}

        tv_cfg = {**self.model_config(self.cfg.model), "protocol": self.protocol, **self.refine_config()}
        return self.stage("triplet_validation" + suffix, tv_cfg, ["match" + suffix], do_validate)

    def grow_rounds(
        self, seeds: dict[str, Any], validated: list[dict[str, Any]]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
        """The paper's cycle: expand, extract, validate, review; the facts accepted in round k are expanded
        in round k+1 (about their subjects, and about their objects that no fact starts from), until ``rounds`` rounds, ``max_facts`` facts or a round that finds nothing new.
        Returns (every round's candidates together, the review rows, the graph's facts)."""
        from knowgic.builder.expand import object_items  # the generation stack loads with the stage

        d = self.spec.defaults
        rounds, max_facts = self.rounds, int(d["max_facts"])
        facts = self.graph_facts(validated, None, [])
        rows = rv.read_review(self.cfg.build_dir / rv.REVIEW_FILE)
        if not self.cfg.expand or rounds < 1:
            return None, rows, facts + self.added_facts(rows, facts)
        grown: dict[str, Any] = {"candidates": [], "proposed_templates": [], "counts": {}, "rounds": []}
        frontier = list(facts)
        for round_no in range(1, rounds + 1):
            if not frontier or (max_facts and len(facts) >= max_facts):
                break
            expanded = len(frontier)
            accepted = [{"relation": r, **t} for r, t in sorted(rv.accepted(rows)[1].items())]
            this = self.grow(seeds, frontier, facts, round_no, accepted if round_no > 1 else None)
            seen = {c["fact_id"] for c in grown["candidates"]}
            grown["candidates"] += [c for c in this["candidates"] if c["fact_id"] not in seen]
            relations = {t["relation"] for t in grown["proposed_templates"]}
            grown["proposed_templates"] += [
                t for t in this["proposed_templates"] if t["relation"] not in relations
            ]
            for k, v in this["counts"].items():
                grown["counts"][k] = grown["counts"].get(k, 0) + v
            rows = self.review(grown)
            now = self.graph_facts(validated, grown, rows)
            now += self.added_facts(rows, now)
            had = {f["fact_id"] for f in facts}
            new = [f for f in now if f["fact_id"] not in had]
            # the next round thinks about each new fact's subject and, where no fact starts from it yet,
            # its object
            frontier = new + object_items(new, now, self.spec)
            grown["rounds"].append(
                {
                    "round": round_no,
                    "expanded": expanded,
                    "candidates": len(this["candidates"]),
                    "known": sum(c["validation"]["known"] for c in this["candidates"]),
                    "new_facts": len(new),
                }
            )
            facts = now
        return grown, rows, facts

    def added_facts(self, rows: list[dict[str, Any]], facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Facts a reviewer added (``kind: added``), validated like any other: kept when the model knows
        them (after refinement)."""
        added = rv.added(rows)
        if not added:
            return []
        config = {**self.model_config(self.cfg.model), "protocol": self.protocol, **self.refine_config(),
                  "added": added, "facts_sha256": sha256_text(rv.dumps(facts))}  # fmt: skip

        def work(_key: str) -> list[dict[str, Any]]:
            for f in added:  # an added fact joins the graphs of the facts it touches (all when none)
                touching = [g for x in facts if {x["subject"], x["answer"]} & {f["subject"], f["answer"]}
                            for g in x["graphs"]]  # fmt: skip
                f["graphs"] = sorted(set(touching or [g for x in facts for g in x["graphs"]]))
            return self.validate_facts(added, gold_from=facts + added)

        scored = self.stage("added_validation", config, ["query_validation"], work)
        have = {f["fact_id"] for f in facts}
        return [f for f in scored if f["validation"]["known"] and f["fact_id"] not in have]

    def review(self, grown: dict[str, Any] | None) -> list[dict[str, Any]]:
        path = self.cfg.build_dir / rv.REVIEW_FILE
        rows = rv.read_review(path)
        if grown is None:
            return rows
        candidates = [c for c in grown["candidates"] if c["validation"]["known"]]
        used = {c["relation"] for c in candidates}
        proposed = [t for t in grown["proposed_templates"] if t["relation"] in used]
        rows = rv.merge_review(rows, candidates, proposed)
        rv.write_review(path, rows)
        if self.cfg.judge and rv.pending(rows):
            judge_cfg = {**self.model_config(self.cfg.judge), "judge": self.spec.judge}
            journal = self.store.journal("judge", stage_key("judge", judge_cfg, {}))
            from knowgic.builder.judge import controls_from_store

            controls = controls_from_store(self.store, self.spec, self.seed)
            rv.run_judge(
                rows, self.generator(self.cfg.judge), self.spec, journal, self.cfg.progress, controls
            )
            rv.write_review(path, rows)
        waiting = rv.pending(rows)
        if waiting:
            raise ReviewPending(
                f"{len(waiting)} review decisions pending in {path}: decide them with `knowgic review "
                f"{self.cfg.build_dir}` (or in the file, or with --judge MODEL), then run this build again"
            )
        return rows

    def graph_facts(
        self, validated: list[dict[str, Any]], grown: dict[str, Any] | None, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        # a seed fact was decided by whoever made the seeds (a published version's review, or the seed file)
        by = f"seed:{self.cfg.source or self.cfg.seeds_file}"
        facts = [
            {**f, "review": {"decision": "seed", "by": by}} for f in validated if f["validation"]["known"]
        ]
        if grown is None:
            return facts
        decided, _templates = rv.accepted(rows)
        by_id = {c["fact_id"]: c for c in grown["candidates"]}
        for rid, final in decided.items():
            cand = by_id.get(rid)
            if cand is None:
                continue
            fact = {**cand, **{k: final[k] for k in rv.EDITABLE}}
            fact["fact_id"] = fact_id(fact["subject"], fact["prompt"], fact["answer"])
            fact["review"] = {
                "decision": final["decision"],
                "by": final["by"],
                "at": final["at"],
                "review_id": rid,
            }
            facts.append(fact)
        distinct: dict[str, dict[str, Any]] = {}
        for f in facts:
            distinct.setdefault(f["fact_id"], f)
        return list(distinct.values())

    def edit_specs(self, seeds: dict[str, Any], facts: list[dict[str, Any]]) -> tuple[list[EditSpec], int]:
        if self.cfg.edits == "published":
            return [
                EditSpec(
                    e["edit_id"],
                    e["subject"],
                    e["prompt"],
                    e["target_true"],
                    e["target_new"],
                    "published",
                    (e["edit_id"],),
                )
                for e in seeds["edits"]
            ], 0
        objects: dict[str, list[str]] = defaultdict(list)
        gold: dict[tuple[str, str], set[str]] = defaultdict(set)
        for f in facts:
            gold[(f["subject"], f["prompt"])].add(f["answer"])
        facts = list(edge_facts(facts))  # one edit per edge: its phrasings are one fact
        for f in facts:
            objects[f["prompt"]].append(f["answer"])
        specs, missing = [], 0
        similar = similar_relations(list(objects), float(self.spec.defaults["relation_match_cutoff"]))
        for f in facts:
            golds = gold[(f["subject"], f["prompt"])]
            new = counterfactual(f, objects[f["prompt"]], golds, self.seed)
            if new is None:  # a relation with one object: its similar relations' objects
                pool = [o for p in similar[f["prompt"]] for o in objects[p]]
                new = counterfactual(f, pool, golds, self.seed)
            if new is None:
                missing += 1
                continue
            eid = EditRequest(f["prompt"], f["subject"], f["answer"], new).edit_id
            specs.append(
                EditSpec(eid, f["subject"], f["prompt"], f["answer"], new, "drawn", tuple(f["graphs"]))
            )
        return specs, missing

    def consistent_chains(self, facts: list[dict[str, Any]], edits: list[EditSpec]) -> dict[str, Any]:
        """Chains whose every fact the model knows as the output version will pose it.

        The evaluation counts ``n_gold`` over the facts on the version's chains, which are fewer than the
        graph's, so a fact known with n_gold = 3 may be unknown with n_gold = 2 (the known rule is a top-m
        rank). Facts on chains are scored again with the version's own n_gold; unknown ones leave the
        graph and the chains are enumerated again, until none drops (a few rounds at most).
        """
        from knowgic.builder.validate import score_facts

        d = self.spec.defaults
        kept, dropped = list(facts), []
        for _ in range(8):
            out = chains_for_edits(
                kept,
                edits,
                self.cfg.scope or "graph",
                self.max_steps,
                self.cap,
                int(d["enumeration_limit"]),
                self.seed,
                int(d["max_chains_per_family"]),
            )
            used = {fid for e in out["edits"] for chain in e["chains"] for fid in chain}
            on_chains = [f for f in kept if f["fact_id"] in used]
            if not on_chains:
                break
            rescored = score_facts(on_chains, self.models.get(self.cfg.model), self.scorer())
            unknown = {f["fact_id"] for f in rescored if not f["validation"]["known"]}
            if not unknown:
                break
            dropped += sorted(unknown)
            kept = [f for f in kept if f["fact_id"] not in unknown]
        out["dropped_by_final_check"] = dropped
        return out

    # --- the whole build --------------------------------------------------------------------------

    def run(self) -> BuildResult:
        started = time.perf_counter()
        try:
            return self._run(started)
        except _Stopped:
            return BuildResult(
                {}, self.ran, self.skipped, None, time.perf_counter() - started, self.stage_seconds
            )

    def _run(self, started: float) -> BuildResult:
        from knowgic.builder.output import chain_rows, version_files, write_folder

        cfg, d = self.cfg, self.spec.defaults
        seeds = self.seeds()
        validated = self.query_validation(seeds)
        grown, rows, facts = self.grow_rounds(seeds, validated)
        named = self.subject_aliases(seeds, facts)
        edits, no_counterfactual = self.edit_specs(seeds, facts)
        graph_cfg = {
            "scope": cfg.scope,
            "max_steps": self.max_steps,
            "cap": self.cap,
            "family_cap": int(d["max_chains_per_family"]),
            "limit": int(d["enumeration_limit"]),
            "seed": self.seed,
            "facts_sha256": sha256_text(rv.dumps(facts)),
            "edits": [vars(e) for e in edits],
        }

        def do_graph(_key: str) -> dict[str, Any]:
            return self.consistent_chains(facts, edits)

        graph_out = self.stage("graph", graph_cfg, ["query_validation"], do_graph)
        by_id = {f["fact_id"]: f for f in facts}
        chains = chain_rows(graph_out, by_id)
        questions = self.chain_questions(chains, seeds["aliases"])
        counts = self.counts(
            seeds, validated, grown, rows, facts, edits, no_counterfactual, graph_out, chains
        )
        counts["chain_questions_known"] = sum(q["known"] for q in questions)
        checked = [c for row in named["subjects"] for c in row["candidates"]]
        counts["subject_alias_candidates"] = len(checked)
        counts["subject_aliases_accepted"] = sum(c["accepted"] for c in checked)
        out = None
        if cfg.out is not None:
            record = self.record(seeds, counts, rows, grown, graph_out)
            provenance = self.provenance(facts, graph_out, grown)
            license_text = None
            if cfg.source is not None:
                from knowgic.dataset.folder import open_dataset

                lic = open_dataset(cfg.source).folder / "LICENSE"
                license_text = lic.read_text(encoding="utf-8") if lic.is_file() else None
            aliases = dict(seeds["aliases"])
            files = version_files(
                cfg.name,
                cfg.version,
                chains,
                aliases,
                record,
                provenance,
                license_text,
                questions,
                named["aliases"],
            )
            write_folder(cfg.out, files, cfg.overwrite)
            out = cfg.out
        return BuildResult(
            counts, self.ran, self.skipped, out, time.perf_counter() - started, self.stage_seconds
        )

    def subject_aliases(self, seeds: dict[str, Any], facts: list[dict[str, Any]]) -> dict[str, Any]:
        """The other names the model knows each subject of the graph by, each validated on the subject's
        known facts (:mod:`knowgic.builder.aliases`)."""
        from knowgic.builder.aliases import RULES_VERSION, subject_aliases

        prompts = sorted({f["prompt"] for f in facts} | {t["prompt"] for t in seeds["templates"].values()})
        config = {
            **self.model_config(self.cfg.model),
            "protocol": self.protocol,
            "subject_aliases": self.spec.subject_aliases,
            "rules_version": RULES_VERSION,
            "seed": self.seed,
            "max_entity_chars": self.spec.defaults["max_entity_chars"],
            "templates": prompts,
            "facts_sha256": sha256_text(rv.dumps(facts)),
        }

        def work(key: str) -> dict[str, Any]:
            return subject_aliases(
                facts,
                self.generator(self.cfg.model),
                self.scorer(),
                self.spec,
                self.store.journal("subject_aliases", key),
                prompts,
                self.seed,
                self.cfg.progress,
            )

        return self.stage("subject_aliases", config, ["query_validation"], work)

    def chain_questions(self, chains: list[dict[str, Any]], aliases: dict[str, Any]) -> list[dict[str, Any]]:
        """The paper's chain-based questions: one per chain, validated on the model (build provenance)."""
        from knowgic.builder.refine import chain_questions

        config = {
            **self.model_config(self.cfg.model),
            "protocol": self.protocol,
            "chain_question": self.spec.chain_question,
        }
        return self.stage(
            "chain_questions",
            config,
            ["graph"],
            lambda _k: chain_questions(
                self.spec, chains, aliases, self.models.get(self.cfg.model), self.scorer()
            ),
        )

    def counts(
        self,
        seeds: dict[str, Any],
        validated: list[dict[str, Any]],
        grown: dict[str, Any] | None,
        rows: list[dict[str, Any]],
        facts: list[dict[str, Any]],
        edits: list[EditSpec],
        no_cf: int,
        graph_out: dict[str, Any],
        chains: list[dict[str, Any]],
    ) -> dict[str, int]:
        c: dict[str, int] = {
            "seed_facts": len(seeds["facts"]),
            "seed_facts_known": sum(f["validation"]["known"] for f in validated),
        }
        if grown is not None:
            cands = grown["candidates"]
            c.update(
                {
                    "triplets_extracted": grown["counts"]["triplets"],
                    "new_candidate_facts": len(cands),
                    "new_facts_known": sum(x["validation"]["known"] for x in cands),
                    "new_facts_accepted": sum(1 for f in facts if f.get("origin") == "extracted"),
                    "proposed_templates": len(grown["proposed_templates"]),
                    "rounds_run": len(grown["rounds"]),
                }
            )
        paths = [(r["edit_id"], *r["chain"]["subjects"], r["chain"]["answers"][-1]) for r in chains]
        family = graph_out.get("family_chains", {})
        with_chains = [e for e in graph_out["edits"] if e["chains"]]
        c.update(
            {
                "graph_facts": len(facts),
                "facts_refined": sum(1 for f in facts if f.get("refined")),
                "facts_added_by_review": sum(1 for f in facts if f.get("origin") == "added"),
                "graph_nodes": graph_out["nodes"],
                "graph_edges": graph_out.get("edges", graph_out["facts"]),
                "phrasings_merged": len(graph_out.get("merged_phrasings", {})),
                "edit_requests": len(edits),
                "edits_without_counterfactual": no_cf,
                "edits_with_chains": len(with_chains),
                "chains": len(chains),
                "phrasing_duplicate_chains": len(paths) - len(set(paths)),
                "chains_restating_edit": sum(bool(r["flags"]["chain_restates_edit"]) for r in chains),
                "families_with_chains": sum(1 for v in family.values() if v),
                "largest_family_chains": max(family.values(), default=0),
                "paths_found": sum(e["paths_found"] for e in graph_out["edits"]),
                "facts_dropped_by_final_check": len(graph_out.get("dropped_by_final_check", [])),
            }
        )
        return c

    def record(
        self,
        seeds: dict[str, Any],
        counts: dict[str, int],
        rows: list[dict[str, Any]],
        grown: dict[str, Any] | None = None,
        graph_out: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        cfg = self.cfg
        from knowgic.dataset.folder import open_dataset

        version = None
        if cfg.source is not None:
            version = open_dataset(cfg.source).version
        summary = rv.summary(rows)
        return {
            "build_key": self.store.digest("graph"),
            "model": {
                "id": cfg.model,
                "revision": self.revision,
                "dtype": cfg.dtype,
            },
            "extractor": cfg.extractor or cfg.model,
            "judge": cfg.judge,
            "protocol": {"name": self.protocol, "params": dict(self.scorer().params)},
            "seeds": {
                "source": f"KnowGIC {version}" if version else str(cfg.seeds_file),
                "version": version,
                "seed_subjects": cfg.seed_subjects,
                "facts": len(seeds["facts"]),
            },
            "edits": cfg.edits,
            "scope": cfg.scope,
            "expand": cfg.expand,
            "settings": {
                **self.spec.defaults,
                "rounds": self.rounds,
                "max_chains_per_edit": self.cap,
                "max_chain_steps": self.max_steps,
                "seed": self.seed,
            },
            "prompts": self.spec.prompts(),
            "review": {
                "summary": summary,
                "by": sorted(
                    set(summary["fact"]["by"]) | set(summary["template"]["by"]) | set(summary["added"]["by"])
                ),
            },
            "counts": counts,
            "rounds": (grown or {}).get("rounds", []),
            "families": _family_record(counts, (graph_out or {}).get("family_chains", {})),
            "stages": self.store.manifest(),
        }

    def provenance(
        self, facts: list[dict[str, Any]], graph_out: dict[str, Any], grown: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        cots = {}
        extractions = {}
        if grown is not None:
            for name, target in (("expand", cots), ("extract", extractions)):
                entry = self.store.manifest().get(name)
                if entry:
                    out = self.store.cached(name, entry["key"]) or []
                    key = "cot_id" if name == "expand" else "sentence_id"
                    target.update({r[key]: r for r in out})
        used = {fid for e in graph_out["edits"] for chain in e["chains"] for fid in chain}
        rows = []
        for f in facts:
            if f["fact_id"] not in used:
                continue
            sources = []
            for s in f.get("sources", []):
                cot = cots.get(s["cot_id"], {})
                ex = extractions.get(s["sentence_id"], {})
                sources.append(
                    {
                        "seed_fact_id": s["seed_fact_id"],
                        "cot_prompt": cot.get("prompt"),
                        "cot_output": cot.get("output"),
                        "sentence": s.get("sentence"),
                        "extraction_output": ex.get("output"),
                        "extracted": s["extracted"],
                        "match_scores": s["scores"],
                    }
                )
            rows.append(
                {
                    "fact_id": f["fact_id"],
                    "subject": f["subject"],
                    "prompt": f["prompt"],
                    "answer": f["answer"],
                    "origin": f.get("origin", "seed"),
                    "validation": {**f["validation"], "protocol": self.protocol},
                    "review": f["review"],
                    "sources": sources,
                }
            )
        return rows


def _family_record(counts: dict[str, int], family_chains: dict[str, int]) -> dict[str, Any]:
    """The chains per family (connected component, named by its first node) and the largest one's share."""
    total = counts.get("chains", 0)
    largest = next(iter(family_chains.items()), (None, 0))
    return {
        "chains": family_chains,
        "largest": {
            "family": largest[0],
            "chains": largest[1],
            "share": round(largest[1] / total, 4) if total else None,
        },
    }


class _Stopped(Exception):
    pass


def run_build(cfg: BuildConfig, spec: BuilderSpec | None = None) -> BuildResult:
    return Build(cfg, spec).run()
