"""Everything an evaluation or a sweep will use, checked before the dataset is planned or the model loads.

    EvaluationRequest ──mode (spec and harness), the metrics' registrations, dtype, device, --limit
                      ──protocol and its parameters (the scorer's own check)
                      ──dataset version or folder opens
                      ──editor resolves ("did you mean"); --stats-corpus/--stats-samples fit it
                      ──hparams: the --hparams file, else the shipped file for the editor and the model's
                        family where that is known before loading (knowgic.models.available.model_family)
                      ──--out is writable, is not a folder of runs, holds no run unless --overwrite
                      ──model: an offline name whose package is installed, a local folder or GGUF file, or
                        a hub id cached here or on a reachable hub (knowgic.models.available.check_model)
                      └─> the editor class, or one KnowgicError line (exit code 2) naming the input

    a sweep ──editors: some, none twice, each resolves; the key-statistics options fit one of them
            ──--out is writable and not one run's folder; the model is checked once
            └─> then each editor's request as above (knowgic.evaluation.sweep)

A typo fails in a second, before minutes of loading, scoring and editing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from knowgic.dataset.folder import open_dataset
from knowgic.editors.base import Editor
from knowgic.editors.hparams import load_hparams, read_hparams_file, validate_hparams
from knowgic.editors.layer_stats import stats_overrides
from knowgic.editors.registry import BUILTIN_EDITORS, resolve_editor
from knowgic.errors import KnowgicError
from knowgic.evaluation.harness import MODES
from knowgic.evaluation.outputs import check_no_run, check_not_a_runs_folder, check_writable
from knowgic.measure.definitions import METRICS
from knowgic.models.available import check_model, model_family
from knowgic.models.loading import check_device_name, resolve_device, resolve_source
from knowgic.scoring import make_scorer
from knowgic.spec import benchmark_spec

if TYPE_CHECKING:
    from knowgic.evaluation.evaluate import EvaluationRequest

DTYPES = ("float32", "bfloat16", "float16")
HPARAMS_OPTIONAL = frozenset({"none", "ice"})
"""Built-in editors that need no hparams file (their defaults are complete)."""


def editor_method_name(name: str, editor_cls: type[Editor]) -> str:
    """The hparams folder / schema name: the built-in name, else the class's ``name``."""
    return name if name in BUILTIN_EDITORS else editor_cls.name


def hparams_required(name: str, editor_cls: type[Editor]) -> bool:
    """Whether the editor needs an hparams file when ``--hparams`` is left out (a built-in with no
    complete defaults)."""
    return name in BUILTIN_EDITORS and editor_method_name(name, editor_cls) not in HPARAMS_OPTIONAL


def check_request(request: EvaluationRequest, model: bool = True, here: bool = True) -> type[Editor]:
    """Check everything ``request`` will use that does not need the model loaded; return the editor class.
    ``model``: check the model too (a sweep checks its one model once); ``here``: the run happens on this
    machine, so the device must be present (a Slurm job's device is on its node: only its name is checked)."""
    spec = benchmark_spec()
    if request.mode not in spec.modes:
        raise KnowgicError(f"unknown mode {request.mode!r}; known: {', '.join(spec.modes)}")
    if request.mode not in MODES:
        raise KnowgicError(
            f"spec/benchmark.yaml declares mode {request.mode!r}, which this version of knowgic does not "
            f"implement (it implements {', '.join(MODES)})"
        )
    problem = METRICS.problem(spec)
    if problem is not None:
        raise KnowgicError(problem)
    if request.dtype not in DTYPES:
        raise KnowgicError(f"unknown dtype {request.dtype!r}; known: {', '.join(DTYPES)}")
    if here:
        resolve_device(request.device)  # an unknown device, or CUDA on a machine without it
    else:
        check_device_name(request.device)
    if request.limit is not None and request.limit < 1:
        raise KnowgicError(f"--limit must be a positive number of edits, got {request.limit}")
    make_scorer(request.protocol, **request.protocol_overrides)  # unknown protocol/params fail here
    open_dataset(request.dataset_version)  # an unknown version or a broken folder fails here
    editor_cls = resolve_editor(request.editor)
    if request.stats_corpus is not None or request.stats_samples is not None:
        if not editor_cls.uses_key_statistics:
            raise KnowgicError(
                f"--stats-corpus/--stats-samples: editor {request.editor!r} uses no key statistics "
                "(they apply to rome, memit, alphaedit, prune, rect and editors built on them)"
            )
        stats_overrides(request.stats_corpus, request.stats_samples)  # a malformed corpus name fails here
    method = editor_method_name(request.editor, editor_cls)
    if request.hparams_path is not None:
        path = Path(request.hparams_path)
        validate_hparams(read_hparams_file(path), method, str(path), editor_cls.hparams_schema)
    if request.out_dir is not None:
        check_writable(request.out_dir)
        check_not_a_runs_folder(Path(request.out_dir))
        check_no_run(request.out_dir, request.overwrite)
    source = check_model(request.model) if model else resolve_source(request.model)
    if request.hparams_path is None and hparams_required(request.editor, editor_cls):
        family = model_family(source)
        if family is not None:  # the shipped file the run will read, read now (one reader: load_hparams)
            load_hparams(method, request.model.strip(), family, editor_schema=editor_cls.hparams_schema)
    return editor_cls


def check_sweep_editors(editors: Sequence[str], stats_given: bool) -> set[str]:
    """A sweep's editors: some, none twice, each resolving; return those with key statistics (the ones
    ``--stats-corpus``/``--stats-samples`` apply to, which must be some when they are given)."""
    if not editors:
        raise KnowgicError("no editors given")
    twice = sorted({e for e in editors if list(editors).count(e) > 1})
    if twice:
        raise KnowgicError(f"--editors names {', '.join(twice)} more than once; each editor runs once")
    with_stats = {e for e in editors if resolve_editor(e).uses_key_statistics}
    if stats_given and not with_stats:
        raise KnowgicError(
            f"--stats-corpus/--stats-samples: none of the editors {', '.join(editors)} uses key statistics"
        )
    return with_stats


def check_sweep_folder(out_dir: Path) -> None:
    """A sweep's ``--out``: writable, and not one run's folder (a sweep writes one folder per editor)."""
    check_writable(out_dir)
    if (out_dir / "results.json").is_file():
        raise KnowgicError(
            f"{out_dir} holds a single run (results.json); a sweep writes one folder per editor, choose "
            "another folder"
        )
