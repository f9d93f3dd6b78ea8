"""Submissions need an account where the deployment says so, and quotas hold per submitter: the real
intake, the real SQLite queue (tests/test_queue_postgres.py runs the quota race again on PostgreSQL), the
command line, and the leaderboard's submit endpoint."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from knowgic.cli import main
from knowgic.errors import KnowgicError
from knowgic.runner.intake.accounts import AccountError, Submitter, add_submitter, identify, read_tokens
from knowgic.runner.intake.submission import job_keys, submit
from knowgic.runner.options import Quotas, SubmitPolicy, submit_policy
from knowgic.runner.queue.keys import QuotaExceeded
from knowgic.runner.queue.queue import JobQueue, JobState
from knowgic.runner.store.signing import TrustedKeys, load_signer
from knowgic.runner.store.store import ResultsStore
from tests.test_queue import fake_submission
from tests.test_submission import MANIFEST, make_submission


def _policy(
    tmp_path: Path, accounts: str = "token", jobs_per_day: int = 0, open_jobs: int = 0
) -> SubmitPolicy:
    return SubmitPolicy(accounts, tmp_path / "tokens", Quotas(jobs_per_day=jobs_per_day, open_jobs=open_jobs))


def _one_line(message: str) -> str:
    assert "\n" not in message and message.strip() == message, message
    return message


# -- identity ------------------------------------------------------------------------------------------
def test_without_accounts_nobody_is_asked_for_one(tmp_path: Path) -> None:
    assert identify(_policy(tmp_path, "none")) is None
    assert identify(_policy(tmp_path, "none"), token="anything", hub_username="mallory") is None


def test_tokens_identify_their_submitter_and_nothing_else(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    alice = add_submitter(policy.tokens_file, "alice")
    bob = add_submitter(policy.tokens_file, "bob")
    assert identify(policy, token=alice) == Submitter("token", "alice")
    assert identify(policy, token=f" {bob}\n").id == "token:bob"
    assert policy.tokens_file.stat().st_mode & 0o777 == 0o600
    text = policy.tokens_file.read_text(encoding="utf-8")
    assert alice not in text and bob not in text  # only hashes are kept
    assert [name for name, _ in read_tokens(policy.tokens_file)] == ["alice", "bob"]
    with pytest.raises(AccountError) as unknown:
        identify(policy, token=alice + "x")
    assert "not one this deployment knows" in _one_line(str(unknown.value))
    with pytest.raises(AccountError) as anonymous:
        identify(policy, token="  ")
    assert "submitters with a token only" in _one_line(str(anonymous.value))
    with pytest.raises(AccountError, match="not a submitter name"):
        add_submitter(policy.tokens_file, "al ice\u2028")


def test_a_hub_account_is_the_signed_in_user_name(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "huggingface")
    assert identify(policy, hub_username="alice-lab").id == "huggingface:alice-lab"
    with pytest.raises(AccountError) as anonymous:
        identify(policy, token="a token is not a sign-in")
    assert "sign in with Hugging Face" in _one_line(str(anonymous.value))
    with pytest.raises(AccountError, match="not a submitter name"):
        identify(policy, hub_username="<img src=x>")


def test_the_policy_comes_from_options_then_variables_then_defaults(monkeypatch, tmp_path: Path) -> None:
    for name in ("KNOWGIC_ACCOUNTS", "SPACE_ID", "KNOWGIC_MAX_JOBS_PER_DAY", "KNOWGIC_MAX_OPEN_JOBS"):
        monkeypatch.delenv(name, raising=False)
    assert submit_policy().accounts == "none"  # one person's local leaderboard
    monkeypatch.setenv("SPACE_ID", "someone/knowgic")
    assert submit_policy().accounts == "huggingface"  # a Space asks for a sign-in unless told otherwise
    monkeypatch.setenv("KNOWGIC_ACCOUNTS", "token")
    monkeypatch.setenv("KNOWGIC_MAX_OPEN_JOBS", "3")
    policy = submit_policy()
    assert (policy.accounts, policy.quotas.open_jobs, policy.quotas.jobs_per_day) == ("token", 3, 24)
    monkeypatch.setenv("KNOWGIC_MAX_OPEN_JOBS", "three")
    with pytest.raises(KnowgicError, match=r"\$KNOWGIC_MAX_OPEN_JOBS: 'three' is not a whole number"):
        submit_policy()
    monkeypatch.setenv("KNOWGIC_ACCOUNTS", "github")
    with pytest.raises(KnowgicError, match="expected one of none, token, huggingface"):
        submit_policy()


# -- quotas, in the queue ------------------------------------------------------------------------------
def test_open_jobs_are_a_quota_per_submitter(tmp_path: Path) -> None:
    queue = JobQueue(f"sqlite:///{tmp_path / 'queue.sqlite'}")
    policy = _policy(tmp_path, open_jobs=3)
    two = fake_submission(tmp_path, models=2, sha="a1" * 32)
    jobs = queue.enqueue(two, job_keys(two), submitter="token:alice", policy=policy)
    assert [job.submitter for job in jobs] == ["token:alice"] * 2
    again = queue.enqueue(two, job_keys(two), submitter="token:alice", policy=policy)  # nothing new
    assert [j.job_id for j in again] == [j.job_id for j in jobs] and len(queue.jobs()) == 2

    more = fake_submission(tmp_path, models=2, sha="b2" * 32)
    with pytest.raises(QuotaExceeded) as refused:
        queue.enqueue(more, job_keys(more), submitter="token:alice", policy=policy)
    assert _one_line(str(refused.value)) == (
        "submitter token:alice is over the quota of 3 open jobs (--max-open-jobs, $KNOWGIC_MAX_OPEN_JOBS): "
        "2 PENDING or RUNNING, and this submission adds 2; submit again when some have finished"
    )
    assert len(queue.jobs()) == 2  # all or nothing
    assert len(queue.enqueue(more, job_keys(more), submitter="token:bob", policy=policy)) == 2  # bob's own

    queue.cancel(jobs[0].job_id)  # no longer open
    assert len(queue.enqueue(more, job_keys(more)[:1], submitter="token:alice", policy=policy)) == 1
    with pytest.raises(QuotaExceeded, match="submit fewer models, protocols or modes at once"):
        big = fake_submission(tmp_path, models=4, sha="c3" * 32)
        queue.enqueue(big, job_keys(big), submitter="token:carol", policy=policy)


def test_jobs_per_day_count_what_was_queued_whatever_became_of_it(tmp_path: Path) -> None:
    queue = JobQueue(f"sqlite:///{tmp_path / 'queue.sqlite'}")
    policy = _policy(tmp_path, jobs_per_day=3)
    first = fake_submission(tmp_path, models=2, sha="a1" * 32)
    for job in queue.enqueue(first, job_keys(first), submitter="huggingface:alice", policy=policy):
        queue.cancel(job.job_id)
    second = fake_submission(tmp_path, models=2, sha="b2" * 32)
    with pytest.raises(QuotaExceeded) as refused:
        queue.enqueue(second, job_keys(second), submitter="huggingface:alice", policy=policy)
    message = _one_line(str(refused.value))
    assert message.startswith(
        "submitter huggingface:alice is over the quota of 3 jobs per day (--max-jobs-per-day, "
        "$KNOWGIC_MAX_JOBS_PER_DAY): 2 queued in the last 24 hours, and this submission adds 2; submit again "
        "after "
    )


def test_an_anonymous_submission_is_refused_by_the_queue_itself(tmp_path: Path) -> None:
    queue = JobQueue(f"sqlite:///{tmp_path / 'queue.sqlite'}")
    submission = fake_submission(tmp_path)
    with pytest.raises(QuotaExceeded, match="submitters with a token only"):
        queue.enqueue(submission, job_keys(submission), policy=_policy(tmp_path))
    assert queue.jobs() == []
    # Without accounts, no submitter and no quota.
    assert len(queue.enqueue(submission, job_keys(submission), policy=_policy(tmp_path, "none", 1, 1))) == 1


def test_concurrent_submissions_cannot_pass_a_quota_together(queue_url: str, tmp_path: Path) -> None:
    """Eight threads, each with its own connection, each queue one job for one submitter whose quota is
    three open jobs: exactly three are queued (the quota is counted inside the inserting transaction)."""
    JobQueue(queue_url)  # tables first
    policy = _policy(tmp_path, open_jobs=3)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def one(index: int) -> None:
        queue = JobQueue(queue_url)
        submission = fake_submission(tmp_path, sha=f"{index:02x}" * 32, name=f"race-{index}")
        barrier.wait()
        try:
            queue.enqueue(submission, job_keys(submission), submitter="token:racer", policy=policy)
            outcomes.append("queued")
        except QuotaExceeded:
            outcomes.append("refused")
        finally:
            queue.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["queued"] * 3 + ["refused"] * 5
    queue = JobQueue(queue_url)
    assert [j.submitter for j in queue.jobs([JobState.PENDING])] == ["token:racer"] * 3


@pytest.fixture
def queue_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'race.sqlite'}"


# -- the intake, and the signed entry ------------------------------------------------------------------
def test_a_submission_names_its_submitter_up_to_the_signed_entry(tmp_path: Path, evaluated_results) -> None:
    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    queue = JobQueue(store.queue_url())
    policy = _policy(tmp_path, open_jobs=1)
    folder = make_submission(tmp_path / "s", {**MANIFEST, "protocols": ["logprob"]})
    with pytest.raises(QuotaExceeded, match="token only"):  # refused before the upload is read
        submit(tmp_path / "no-such-upload.tar.gz", store, queue, policy=policy)
    submission, [job] = submit(folder, store, queue, submitter=Submitter("token", "alice"), policy=policy)
    assert job.submitter == "token:alice"
    archives = sorted(store.submissions_dir.iterdir())
    with pytest.raises(QuotaExceeded, match="1 open jobs"):  # refused before anything is stored
        submit(
            make_submission(tmp_path / "s2", {**MANIFEST, "version": "0.2.0", "protocols": ["logprob"]}),
            store,
            queue,
            submitter=Submitter("token", "alice"),
            policy=policy,
        )
    assert sorted(store.submissions_dir.iterdir()) == archives

    # A worker's entry holds the job record, signed: the submitter cannot be edited afterwards.
    claimed = queue.claim("w1")
    assert claimed is not None
    entry = store.add_verified(
        evaluated_results,
        archive_path=submission.archive,
        manifest=submission.manifest,
        job=claimed.record(),
        signer=load_signer(),
    )
    reader = ResultsStore(store.root, verified_cache=tmp_path / "cache", trusted_keys=TrustedKeys.load())
    [listed] = reader.scan().entries
    assert (listed.source, listed.submitter) == ("verified", "token:alice")
    record = json.loads(entry.path.read_text(encoding="utf-8"))
    record["job"]["submitter"] = "token:famous-lab"
    entry.path.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    [edited] = ResultsStore(store.root, verified_cache=tmp_path / "cache").scan().entries
    assert edited.source == "local" and "does not match the entry" in edited.trust


# -- the command line --------------------------------------------------------------------------------------
def test_runner_submit_with_accounts_and_quotas(tmp_path: Path, capsys, monkeypatch) -> None:
    tokens, store = tmp_path / "tokens", tmp_path / "store"
    monkeypatch.delenv("KNOWGIC_SUBMITTER_TOKEN", raising=False)
    monkeypatch.delenv("KNOWGIC_QUEUE_URL", raising=False)
    assert main(["runner", "add-submitter", "alice", "--submitter-tokens", str(tokens)]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1].split()[-1]
    assert token.startswith("kgs_")
    folder = make_submission(tmp_path / "s")  # two protocols: two jobs
    common = ["--store", str(store), "--accounts", "token", "--submitter-tokens", str(tokens)]

    assert main(["runner", "submit", str(folder), *common]) == 2
    err = capsys.readouterr().err
    assert _one_line(err.strip()).startswith(
        "error: this deployment queues jobs for submitters with a token only"
    )

    monkeypatch.setenv("KNOWGIC_SUBMITTER_TOKEN", token)
    assert main(["runner", "submit", str(folder), *common, "--max-open-jobs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert _one_line(err) == (
        "error: submitter token:alice is over the quota of 1 open jobs (--max-open-jobs, "
        "$KNOWGIC_MAX_OPEN_JOBS): 0 PENDING or RUNNING, and this submission adds 2; submit fewer models, "
        "protocols or modes at once"
    )
    assert main(["runner", "submit", str(folder), *common]) == 0
    out = capsys.readouterr().out
    assert "submission rank-one-ft 0.1.0 by token:alice:" in out
    assert main(["runner", "status", "--store", str(store), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["submitter"] for r in records] == ["token:alice", "token:alice"]

    # Without --accounts nor $KNOWGIC_ACCOUNTS, a local submit needs nothing.
    monkeypatch.delenv("KNOWGIC_ACCOUNTS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    other = make_submission(tmp_path / "o", {**MANIFEST, "version": "0.3.0"})
    assert main(["runner", "submit", str(other), "--store", str(store)]) == 0
    assert " by " not in capsys.readouterr().out


# -- the leaderboard's submit endpoint ---------------------------------------------------------------------
def test_the_leaderboard_refuses_an_anonymous_submit_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from gradio_client import handle_file

    from tests.test_leaderboard import write_submission
    from tests.test_leaderboard_trust import _serve

    tokens = tmp_path / "tokens"
    token = add_submitter(tokens, "alice")
    monkeypatch.setenv("KNOWGIC_ACCOUNTS", "token")
    monkeypatch.setenv("KNOWGIC_SUBMITTER_TOKENS", str(tokens))
    monkeypatch.setenv("KNOWGIC_MAX_OPEN_JOBS", "1")
    root = tmp_path / "store"
    root.mkdir()
    app, client = _serve(root, tmp_path / "cache")
    try:
        archive = write_submission(tmp_path / "upload")
        message = client.predict(handle_file(str(archive)), "", api_name="/submit")
        assert _one_line(message).startswith("error: this deployment queues jobs for submitters with a token")
        message = client.predict(handle_file(str(archive)), "kgs_guessed", api_name="/submit")
        assert _one_line(message) == (
            "error: this submitter token is not one this deployment knows (ask its operator for one)"
        )
        assert JobQueue(f"sqlite:///{root / 'queue.sqlite'}").jobs() == []
        message = client.predict(handle_file(str(archive)), token, api_name="/submit")
        assert message.startswith("queued 1 job(s) for scripted-editor 1.0.0"), message
        second = write_submission(tmp_path / "upload2", name="second-editor")
        message = client.predict(handle_file(str(second)), token, api_name="/submit")
        assert _one_line(message).startswith("error: submitter token:alice is over the quota of 1 open jobs")
        [job] = JobQueue(f"sqlite:///{root / 'queue.sqlite'}").jobs()
        assert job.submitter == "token:alice"
    finally:
        app.close()


def test_the_submit_handler_takes_the_hub_user_from_the_session(tmp_path: Path, monkeypatch) -> None:
    """On a Space, Gradio injects the signed-in user (gr.OAuthProfile) into the handler: none for an
    anonymous caller, who is refused in one line; a signed-in user's jobs carry their name."""
    import gradio as gr
    from gradio.helpers import special_args

    from knowgic.leaderboard.app import LeaderboardState, QueueTab
    from tests.test_leaderboard import write_submission

    monkeypatch.setenv("KNOWGIC_ACCOUNTS", "huggingface")
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_local_login")  # off a Space, Gradio signs in as the host's login
    store = ResultsStore(tmp_path / "store", verified_cache=tmp_path / "cache")
    tab = QueueTab(LeaderboardState(store, store.queue_url(), False), 50 * 1024 * 1024)
    archive = write_submission(tmp_path / "upload")
    inputs, *_ = special_args(tab.do_submit, inputs=[str(archive)], request=None)
    assert inputs[:2] == [str(archive), None]  # the profile's place, filled from the (absent) session
    message = tab.do_submit(*inputs)
    assert _one_line(message) == (
        "error: this leaderboard queues jobs for signed-in submitters only: sign in with Hugging Face first"
    )
    profile = gr.OAuthProfile(
        {"name": "Alice", "preferred_username": "alice", "profile": "https://hf.co/alice", "picture": ""}
    )
    assert tab.do_submit(str(archive), profile).startswith("queued 1 job(s)")
    [job] = JobQueue(store.queue_url()).jobs()
    assert job.submitter == "huggingface:alice"


def test_a_sign_in_that_cannot_work_stops_the_leaderboard_in_one_line(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from knowgic.leaderboard.accounts import leaderboard_policy

    for name in ("KNOWGIC_ACCOUNTS", "OAUTH_CLIENT_ID", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/knowgic")  # a Space: sign-in by default
    root = tmp_path / "store"
    root.mkdir()
    assert main(["leaderboard", "--store", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert _one_line(err).startswith("error: this Space takes submissions from signed-in users")
    assert "hf_oauth: true" in err
    monkeypatch.setenv("OAUTH_CLIENT_ID", "client-id")
    assert leaderboard_policy().accounts == "huggingface"
    monkeypatch.setenv("KNOWGIC_ACCOUNTS", "none")  # an explicit choice wins
    monkeypatch.delenv("OAUTH_CLIENT_ID")
    assert leaderboard_policy().accounts == "none"
