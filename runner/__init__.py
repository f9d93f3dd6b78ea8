"""KnowGIC runner: evaluates submitted editors in sandboxed containers, with a job queue and a results store.

Submitted code only ever runs in the edit stage; scores come from a separate container built from the
project's own image (see ``README.md``, "Running the runner").
"""
