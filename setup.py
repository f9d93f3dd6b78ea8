"""Packaging: one root import package, ``knowgic``.

The project keeps ``runner/`` and ``leaderboard/`` as top-level folders and ``spec/`` as the declarative
spec, but they install inside the root package, so nothing generic lands in site-packages:

    runner/       ->  knowgic.runner
    leaderboard/  ->  knowgic.leaderboard
    spec/         ->  knowgic/_spec   (data only; found by knowgic.paths.spec_dir)

Everything else is declared in pyproject.toml; this file only computes the package list that the mapping
implies, which pyproject.toml cannot express.
"""

from setuptools import find_namespace_packages, setup

MAPPED = {"knowgic.runner": "runner", "knowgic.leaderboard": "leaderboard", "knowgic._spec": "spec"}
DATA = [
    "**/*.json",
    "**/*.yaml",
    "**/*.md",
    "**/*.bib",
    "**/*.csv",
    "**/*.parquet",
    "**/*.jsonl",
    "**/*.safetensors",
    "**/*.txt",
    "**/LICENSE",
    "**/*.py",
]

packages = find_namespace_packages(include=["knowgic", "knowgic.*"], exclude=["*.__pycache__"])
for name, folder in MAPPED.items():
    packages += [name] + [
        f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*.__pycache__"])
    ]

setup(packages=packages, package_dir=MAPPED, package_data={"": DATA})
