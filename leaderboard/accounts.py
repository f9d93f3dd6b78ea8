"""Who may queue jobs from the leaderboard's Submit tab, and how many: the runner's submit policy, read
from the environment (a Space's variables), for the Gradio handler.

    $KNOWGIC_ACCOUNTS, quotas (runner/options.py) --> submit_policy() --> what the tab shows:
        none          no sign-in (one person's local leaderboard: the default off a Space)
        huggingface   gr.LoginButton; the handler gets the signed-in user (gr.OAuthProfile) from the
                      session (the default on a Space; its README needs `hf_oauth: true`)
        token         a password field for a submitter token (`knowgic runner add-submitter NAME`)
    submit_upload(path, store, queue, policy, hub_username=..., token=...)
        --> identify (one-line refusal when anonymous) --> runner submit: quotas enforced in the queue

Nothing here trusts the browser: the Hugging Face user comes from Gradio's signed session, never from a
form field, and a token is checked against its hash in the operator's tokens file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from knowgic.runner.intake.accounts import identify
from knowgic.runner.options import SubmitPolicy, submit_policy

if TYPE_CHECKING:
    from knowgic.runner.intake.submission import Submission
    from knowgic.runner.queue.queue import Job, JobQueue
    from knowgic.runner.store.store import ResultsStore

__all__ = ["SubmitPolicy", "submit_policy", "submit_upload"]


def submit_upload(
    path: Path,
    store: ResultsStore,
    queue: JobQueue,
    policy: SubmitPolicy,
    *,
    hub_username: str | None = None,
    token: str | None = None,
) -> tuple[Submission, list[Job]]:
    """Queue an uploaded submission for the submitter the policy asks for: ``hub_username`` (the signed-in
    Hugging Face user, from ``gr.OAuthProfile.username``) or ``token``. Raises a
    :class:`knowgic.errors.KnowgicError` with one line: no account where one is required, an unknown
    token, a quota the submission would go over, or what is wrong with the submission."""
    from knowgic.runner.intake.submission import submit

    submitter = identify(policy, token=token, hub_username=hub_username)  # before the upload is read
    return submit(path, store, queue, submitter=submitter, policy=policy)
