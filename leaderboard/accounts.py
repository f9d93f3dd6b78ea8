"""Who may queue jobs from the leaderboard's Submit tab, and how many: the runner's submit policy, read
from the environment (a Space's variables), for the Gradio handler.

    $KNOWGIC_ACCOUNTS, quotas (runner/options.py) --> leaderboard_policy() --> what the tab shows:
        none          no sign-in (one person's local leaderboard: the default off a Space)
        huggingface   gr.LoginButton; the handler gets the signed-in user (gr.OAuthProfile) from the
                      session (the default on a Space; its README needs `hf_oauth: true`)
        token         a password field for a submitter token (`knowgic runner add-submitter NAME`)
    submit_upload(path, store, queue, policy, hub_username=..., token=...)
        --> identify (one-line refusal when anonymous) --> runner submit: quotas enforced in the queue

:func:`leaderboard_policy` refuses, in one line before the app starts, a sign-in Gradio could not serve:
a Space without OAuth (no ``hf_oauth: true``), or a local app whose host has no Hugging Face login (Gradio
signs a local user in as that login).

Nothing here trusts the browser: the Hugging Face user comes from Gradio's signed session, never from a
form field, and a token is checked against its hash in the operator's tokens file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from knowgic.errors import KnowgicError
from knowgic.runner.intake.accounts import identify
from knowgic.runner.options import ACCOUNTS_ENV, SPACE_ENV, SubmitPolicy, submit_policy

if TYPE_CHECKING:
    from knowgic.runner.intake.submission import Submission
    from knowgic.runner.queue.queue import Job, JobQueue
    from knowgic.runner.store.store import ResultsStore

OAUTH_ENV = "OAUTH_CLIENT_ID"  # set by Hugging Face on a Space whose README says `hf_oauth: true`


def leaderboard_policy() -> SubmitPolicy:
    """The submit policy from the environment (:func:`knowgic.runner.options.submit_policy`), refused in
    one line when its sign-in cannot work here."""
    policy = submit_policy()
    if policy.accounts != "huggingface":
        return policy
    if os.environ.get(SPACE_ENV):
        if not os.environ.get(OAUTH_ENV):
            raise KnowgicError(
                f"this Space takes submissions from signed-in users (${ACCOUNTS_ENV}=huggingface, the default on a "
                "Space) but has no Hugging Face sign-in: add `hf_oauth: true` to the Space's README front "
                f"matter, or set ${ACCOUNTS_ENV} to token or none"
            )
        return policy
    from huggingface_hub import get_token

    if get_token() is None:
        raise KnowgicError(
            f"${ACCOUNTS_ENV}=huggingface off a Space signs a user in as this host's own Hugging Face login, and "
            f"it has none: log in (`hf auth login`), or set ${ACCOUNTS_ENV} to token or none"
        )
    return policy


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
