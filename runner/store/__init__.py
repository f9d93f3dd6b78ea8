"""The results store: the trust boundary between the runner and whoever reads its results (the
leaderboard, ``knowgic store``). ``store`` keeps verified runs and submission archives, and believes
nothing for being in its folder: every results file passes ``checks`` (sizes, schema, self-hash, values,
recomputed metrics) whenever it is read, and an entry counts as the runner's only when ``signing`` verifies
its signature against a key the reader trusts. ``commands`` is ``knowgic store add / list / keys``: it
lives here rather than beside ``knowgic runner``'s commands because it needs nothing of the runner but
the store, so the leaderboard's hosts can manage a store without the queue or a container engine.
"""
