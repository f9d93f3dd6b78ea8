"""The evaluation sections of spec/benchmark.yaml: typed loading, checks, and where the code uses them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from knowgic.errors import KnowgicError
from knowgic.evaluation.evaluate import EvaluationRequest, check_request
from knowgic.evaluation.outcomes import _COMPUTE
from knowgic.evaluation.spec import load_evaluation_spec
from knowgic.paths import spec_dir


def _spec_data() -> dict:
    return yaml.safe_load((spec_dir() / "benchmark.yaml").read_text(encoding="utf-8"))


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "benchmark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_shipped_spec_declares_every_metric_the_runner_computes() -> None:
    spec = load_evaluation_spec()
    assert spec.default_protocol == "logprob" and spec.default_mode == "independent"
    assert list(spec.modes) == ["independent", "sequential"]
    assert set(spec.metrics) == set(_COMPUTE)
    kinds = {name: m.kind for name, m in spec.metrics.items()}
    assert kinds["efficacy"] == kinds["generalization"] == "edit_outcome"
    assert kinds["specificity"] == "clustered_proportion" and kinds["ifr"] == "ratio_of_sums"
    assert spec.metrics["deep_editing_score"].of == ("ifr", "preservation", "efficacy", "specificity")
    assert "ifr_by_length.5" in spec.metric_paths() and "ifr_by_length" not in spec.metric_paths()
    assert spec.metrics["ifr"].direction == "lower" and spec.metrics["ifr"].label == "IFR"
    assert spec.metrics["specificity"].direction == "higher"
    assert all(m.version >= 1 for m in spec.metrics.values())


def test_request_defaults_come_from_the_spec(tmp_path, monkeypatch) -> None:
    data = _spec_data()
    data["default_protocol"], data["default_mode"] = "greedy", "sequential"
    path = _write(tmp_path, data)
    monkeypatch.setattr("knowgic.scoring.spec.spec_dir", lambda: path.parent)
    request = EvaluationRequest(model="knowgic-tiny", editor="none")
    assert (request.protocol, request.mode) == ("greedy", "sequential")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["metrics"]["ifr"].update(direction="down"), r"metrics\.ifr\.direction"),
        (lambda d: d["metrics"]["efficacy"].update(version=0), r"metrics\.efficacy\.version"),
        (lambda d: d["metrics"]["preservation"].pop("label"), r"metrics\.preservation\.label"),
        (lambda d: d["metrics"]["ifr"].update(kind="mean"), r"metrics\.ifr\.kind must be one of"),
        (lambda d: d["metrics"]["ifr"].update(bounds=[1, 0]), r"metrics\.ifr\.bounds"),
        (lambda d: d["metrics"]["deep_editing_score"].update(of=["ifr", "x"]), r"of names x"),
        (lambda d: d.update(default_mode="parallel"), "default_mode 'parallel'"),
        (lambda d: d.update(default_protocol="telepathy"), "default_protocol 'telepathy'"),
        (lambda d: d.pop("modes"), "'modes'"),
    ],
)
def test_broken_spec_is_a_one_line_error(tmp_path, change, message: str) -> None:
    data = _spec_data()
    change(data)
    with pytest.raises(KnowgicError, match=message):
        load_evaluation_spec(_write(tmp_path, data))


def test_accepted_modes_and_metric_versions_are_the_specs(tmp_path, monkeypatch) -> None:
    data = _spec_data()
    data["modes"]["parallel"] = "not implemented"
    del data["metrics"]["generalization"]
    path = _write(tmp_path, data)
    monkeypatch.setattr("knowgic.scoring.spec.spec_dir", lambda: path.parent)
    with pytest.raises(
        KnowgicError, match="unknown mode 'batched'; known: independent, sequential, parallel"
    ):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none", mode="batched"))
    with pytest.raises(KnowgicError, match="declares mode 'parallel', which this version"):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none", mode="parallel"))
    with pytest.raises(KnowgicError, match="no version for the metric\\(s\\) generalization"):
        check_request(EvaluationRequest(model="knowgic-tiny", editor="none"))
