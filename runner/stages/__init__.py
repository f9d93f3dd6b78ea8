"""The stages of a job, the only runner code that runs inside the containers: the untrusted edit stage
between two trusted ones, and the contract between them. ``prepare`` (trusted, reads the dataset) writes
what an editing method may know; ``edit`` (untrusted: the submission's editor, in an image without the
dataset) writes what each edit changed as deltas; ``score`` (trusted, no submission code) replays the
deltas on the pristine model through ``knowgic evaluate``'s own code. ``contract`` (the job, the edit
requests, the markers; no torch) is all the worker host shares with them, and ``deltas`` all the edit
stage shares with the score stage. Nothing here imports the host, the intake or the store: a stage knows
only its job folder. ``timing_split`` times the split against a plain ``knowgic evaluate``. Run with
``python -m knowgic.runner.stages prepare | edit | score`` (:mod:`knowgic.runner.stages.cli`).
"""
