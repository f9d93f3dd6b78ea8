"""Everything a build will use, checked before its first stage (and before its build folder is made).

    BuildConfig ──source (version or folder) / seed and template files exist and read
                ──models (--model, --extractor, --judge) can load here (knowgic.models.available)
                ──the build extra's modules the configured stages import are installed
                ──the spaCy pipeline (--extractor spacy)
                ──--out is free, or a dataset folder and --overwrite is given
                └─> None, or one KnowgicError line naming the input

A stage that later needs what was missing would otherwise fail after minutes of generation.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from knowgic.errors import KnowgicError
from knowgic.extras import install_hint

if TYPE_CHECKING:
    from knowgic.builder.pipeline import BuildConfig
    from knowgic.builder.spec import BuilderSpec

EXTRA = "build"
ALWAYS = ("networkx",)
"""Modules of the build extra that every build imports (the graph stage)."""
GROWTH = ("pysbd", "rapidfuzz")
"""Modules of the growth stages: segmentation and matching."""
CONSTRAINED = ("lmformatenforcer",)
"""Modules of the constrained generation of a model extractor and of the judge."""
RULE_EXTRACTORS = ("spacy", "templates")
"""``--extractor`` values that name rules, not a model."""


def _missing_modules(cfg: BuildConfig) -> list[str]:
    needed = list(ALWAYS)
    if cfg.expand:
        needed += GROWTH
        if cfg.extractor not in RULE_EXTRACTORS:
            needed += CONSTRAINED
    if cfg.judge is not None:
        needed += [m for m in CONSTRAINED if m not in needed]
    return [m for m in needed if importlib.util.find_spec(m) is None]


def check_build(cfg: BuildConfig, spec: BuilderSpec) -> None:
    """Raise :class:`KnowgicError` with one line for the first input of ``cfg`` the build cannot use."""
    from knowgic.builder.output import out_problem
    from knowgic.models.available import check_model

    for flag, path in (("--seeds", cfg.seeds_file), ("--templates", cfg.templates_file)):
        if path is not None and not path.is_file():
            raise KnowgicError(f"{flag} {path}: no such file")
    if cfg.seeds_file is not None and cfg.templates_file is not None:
        from knowgic.builder.seeds import read_templates, seeds_from_file

        seeds_from_file(cfg.seeds_file, read_templates(cfg.templates_file))  # the seeds stage's reader
    if cfg.source is not None:
        from knowgic.dataset.folder import open_dataset

        open_dataset(cfg.source)
    if cfg.build_dir.exists() and not cfg.build_dir.is_dir():
        raise KnowgicError(f"--build-dir {cfg.build_dir} is a file, not a folder")
    for flag, name in (("--model", cfg.model), ("--extractor", cfg.extractor), ("--judge", cfg.judge)):
        if name is None or (flag == "--extractor" and name in RULE_EXTRACTORS):
            continue
        try:
            check_model(name)
        except KnowgicError as exc:
            hint = (
                f" ('{RULE_EXTRACTORS[0]}' and '{RULE_EXTRACTORS[1]}' are rules)"
                if flag == "--extractor"
                else ""
            )
            raise KnowgicError(f"{flag}: {exc}{hint}") from None
    missing = _missing_modules(cfg)
    if missing:
        raise KnowgicError(f"this build needs {', '.join(missing)}: {install_hint(EXTRA)}")
    if cfg.extractor == RULE_EXTRACTORS[0] and cfg.expand:
        from knowgic.builder.spacy_rules import require_spacy

        require_spacy(spec)
    if cfg.out is not None:
        problem = out_problem(cfg.out, cfg.overwrite)
        if problem is not None:
            raise KnowgicError(problem)
