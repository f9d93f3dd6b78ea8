"""The dataset stage: KnowGIC as versioned Hugging Face dataset folders shipped inside the package.

- ``versions``: which versions exist (``spec/benchmark.yaml``), their folders and content hashes, loading
  with ``datasets``; ``loading``: cases, aliases and a :class:`~knowgic.dataset.loading.DatasetRef` for
  the other stages.
- ``schemas``: the JSON Schemas of ``spec/schemas`` (registry, validators, dataset features).
- ``validate`` and ``checks``: ``knowgic validate`` (schema errors, semantic warnings).
- ``build``, ``corrections``, ``derive``, ``card``: ``python -m knowgic.dataset.build`` makes every version
  folder from the vendored upstream files (``upstream/``, read-only).
- ``publish``: ``knowgic publish`` to the Hugging Face Hub, tagged ``vX.Y.Z``.
"""
