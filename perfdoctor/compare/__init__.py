"""Two runs -> what changed, and whether CI should pass.

- ``diff``           :func:`~perfdoctor.compare.diff.diff_runs`: metric deltas, latency statistics,
                     kernel and finding changes
- ``lead``           copies per step and the lines a diff leads with
- ``comparability``  are the two traces windows onto the same kind of work
- ``crossvendor``    matching kernels across GPU vendors by family and operation
- ``processes``      the process as the unit of replication (``run --repeat``)
- ``stats``          two-sample statistics in numpy (checked against scipy)
- ``gate``           budgets and rule checks for CI, one gate over every rank (``merge_gates``;
                     which ranks pair up is :func:`perfdoctor.pipeline.paired_ranks`)

May import: pipeline, rules, analysis, collectors, bundle, profile, names, io, text, errors.
Until step 2 of the house plan, ``gate`` also words a diff with reports.diff_report.
"""
