"""Small models run single-threaded on the CPU (unless the user chose a count); the count comes back after."""

from __future__ import annotations

import torch

from knowgic.models.threads import SMALL_MODEL_PARAMETERS, cpu_threads, threads_for


def test_small_model_on_cpu_gets_one_thread_and_the_count_comes_back(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        small = torch.nn.Linear(16, 16)
        with cpu_threads(small, "cpu") as chosen:
            assert chosen == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        assert threads_for(small, "meta") == 2  # not a CPU run: left alone
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert threads_for(small, "cpu") == 2  # the user's own choice wins
    finally:
        torch.set_num_threads(previous)


def test_large_model_keeps_every_thread(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    big = torch.nn.Linear(1, SMALL_MODEL_PARAMETERS, bias=False, device="meta")
    assert threads_for(big, "cpu") == torch.get_num_threads()


def test_results_record_the_threads_used(knowgic_tiny, monkeypatch) -> None:
    from knowgic.evaluation.evaluate import EvaluationRequest, evaluate

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    run = evaluate(
        EvaluationRequest(model="knowgic-tiny", editor="none", limit=1), progress=False, loaded=knowgic_tiny
    )
    assert run.document["environment"]["torch_threads"] == 1
