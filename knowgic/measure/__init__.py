"""Measuring a run: its typed records, one registered function per metric, and the one computation.

::

    records.py      Records.from_document: the chains and per-edit records a results document carries
    registry.py     MetricRegistry, EditSums: a metric is a declaration in spec/benchmark.yaml plus one
                    function from Records to per-edit sums a_e, b_e
    definitions.py  every built-in metric's function (METRICS, the default registry)
    compute.py      compute(records, spec): values, n, reasons, intervals and counts, in document shape;
                    metrics_of_sums(sums): the metric entries from per-edit sums alone
    private.py      a private split's block: opaque edit keys and per-edit sums (read_private)
    gap.py          the private split's flag: a run's IFR gap against honest editors' gaps
    compare.py      paired comparisons of runs: compare_results, compare_private, rank_basis
    ranks.py        rank ranges of runs of one ranking (RankingKey), in the order of their values, from
                    the private split where every run has one
"""
