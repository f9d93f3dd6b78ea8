"""spec/benchmark.yaml: one reader (knowgic.spec), its schema, its checks, and where the code uses it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, check_request
from knowgic.measure.definitions import METRICS
from knowgic.paths import spec_dir
from knowgic.spec import benchmark_spec, read_spec


def _spec_data() -> dict:
    return yaml.safe_load((spec_dir() / "benchmark.yaml").read_text(encoding="utf-8"))


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "benchmark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_shipped_spec_declares_every_metric_the_registry_computes() -> None:
    spec = benchmark_spec()
    assert METRICS.problem(spec) is None
    assert spec.default_protocol == "logprob" and spec.default_mode == "independent"
    assert list(spec.modes) == ["independent", "sequential"]
    kinds = {name: m.kind for name, m in spec.metrics.items()}
    assert kinds["efficacy"] == kinds["generalization"] == "edit_outcome"
    assert kinds["specificity"] == "clustered_proportion" and kinds["ifr"] == "ratio_of_sums"
    assert spec.metrics["deep_editing_score"].of == (
        "ifr_per_edit",
        "preservation_macro",
        "efficacy",
        "specificity",
    )
    assert "ifr_by_length.5" in spec.metric_paths() and "ifr_by_length" not in spec.metric_paths()
    assert spec.metrics["ifr"].direction == "lower" and spec.metrics["ifr"].label == "IFR"
    assert spec.metrics["specificity"].direction == "higher"
    assert all(m.version >= 1 for m in spec.metrics.values())
    assert spec.protocol("generate").known_threshold == 0.2 and spec.protocols["logprob"].deterministic
    assert "1.1.0" in spec.versions and spec.versions["1.1.0"].based_on == "1.0.0"


def test_the_spec_is_read_once_and_not_at_import() -> None:
    """benchmark_spec() caches one object; importing the metric code does not read the file."""
    import subprocess
    import sys

    assert benchmark_spec() is benchmark_spec()
    code = (
        "import knowgic.spec as s, knowgic.measure.compare, knowgic.intervals, knowgic.paired, "
        "knowgic.recompute, knowgic.evaluation.sweep; print(s.benchmark_spec.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_request_defaults_come_from_the_spec(tmp_path, use_spec) -> None:
    data = _spec_data()
    data["default_protocol"], data["default_mode"] = "greedy", "sequential"
    use_spec(_write(tmp_path, data))
    request = EvaluationRequest(model="knowgic-tiny", editor="none")
    assert (request.protocol, request.mode) == ("greedy", "sequential")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["metrics"]["ifr"].update(direction="down"),
            r"/metrics/ifr/direction: expected one of \"lower\", \"higher\", got 'down'",
        ),
        (
            lambda d: d["metrics"]["efficacy"].update(version=0),
            r"/metrics/efficacy/version: expected a number >= 1, got 0",
        ),
        (
            lambda d: d["metrics"]["preservation"].pop("label"),
            r"/metrics/preservation: missing required field 'label'",
        ),
        (
            lambda d: d["metrics"]["ifr"].update(kind="mean"),
            r"/metrics/ifr/kind: expected one of \"edit_outcome\", .* got 'mean'",
        ),
        (
            lambda d: d["metrics"]["ifr"].update(bounds=[1, 0]),
            r"/metrics/ifr/bounds: expected \[low, high\] with low < high, got \[1, 0\]",
        ),
        (lambda d: d["metrics"]["ifr"].update(colour="red"), r"/metrics/ifr: unknown field 'colour'"),
        (
            lambda d: d["metrics"]["deep_editing_score"].pop("of"),
            r"/metrics/deep_editing_score: missing required field 'of'",
        ),
        (
            lambda d: d["metrics"]["deep_editing_score"].update(of=["ifr", "x"]),
            r"/metrics/deep_editing_score/of: names x",
        ),
        (lambda d: d.update(default_mode="parallel"), "/default_mode: 'parallel' is not one of the modes"),
        (lambda d: d.update(default_protocol="telepathy"), "/default_protocol: 'telepathy' is not one of"),
        (lambda d: d.pop("modes"), "/: missing required field 'modes'"),
        (
            lambda d: d["dataset"]["versions"]["1.1.0"].update(sha256="x"),
            r"/dataset/versions/1\.1\.0/sha256: expected a string matching",
        ),
        (
            lambda d: d["protocols"]["generate"].update(known_threshold=2),
            r"/protocols/generate/known_threshold: expected a number <= 1, got 2",
        ),
    ],
)
def test_broken_spec_is_a_one_line_error(tmp_path, change, message: str) -> None:
    data = _spec_data()
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(KnowgicError, match=message) as caught:
        read_spec(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_accepted_modes_and_metrics_are_the_specs(tmp_path, use_spec) -> None:
    data = _spec_data()
    data["modes"]["parallel"] = "not implemented"
    del data["metrics"]["generalization"]
    use_spec(_write(tmp_path, data))
    with pytest.raises(
        KnowgicError, match="unknown mode 'batched'; known: independent, sequential, parallel"
    ):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none", mode="batched"))
    with pytest.raises(KnowgicError, match="declares mode 'parallel', which this version"):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none", mode="parallel"))
    with pytest.raises(KnowgicError, match="declares no metric generalization, which knowgic computes"):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none"))
