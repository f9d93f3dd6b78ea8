"""Intake: where a submission crosses into the runner. Everything that arrives here is untrusted input (an
archive or folder, its ``submission.yaml``, its requirement lines) and is handled by trusted code only:
``archive`` unpacks it without following a link or passing a size, file-count or compression limit,
``manifest`` parses and validates ``submission.yaml``, ``submission`` packs the normalised archive that the
store keeps and enqueues its jobs. ``wheels`` fetches the wheels a submission asks for, on the trusted side,
in a sandbox, so that nothing of the submission runs while its requirements are resolved. No submitted code
runs in this package.
"""
