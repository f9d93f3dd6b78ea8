"""Evaluation stage: plan -> harness -> outcomes -> metrics -> results document."""

BASELINES = ("none", "ice", "rome", "memit", "alphaedit", "prune", "rect", "ft", "lora")
"""The baseline editors a sweep runs by default."""
