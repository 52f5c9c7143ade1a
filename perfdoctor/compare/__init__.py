"""Two runs -> what changed, and whether CI should pass.

- ``diff``           :func:`~perfdoctor.compare.diff.diff_runs` (two Diagnoses -> ``Diff``, ``MetricChange``):
                     metric deltas and verdicts, finding changes
- ``samples``        ``step_samples`` of one run, ``SAMPLED_METRICS``, the run-to-run noise floors,
                     ``compare_step_samples``
- ``kernels``        ``kernel_table``, ``compare_kernels`` -> ``KernelDiff``: kernels matched by name
- ``lead``           copies per step (``compare_copies``)
- ``comparability``  are the two traces windows onto the same kind of work; ``run_facts``,
                     ``check_comparable`` -> ``Mismatch``
- ``crossvendor``    matching kernels across GPU vendors by family and operation (``match_by_family``)
- ``processes``      the process as the unit of replication (``run --repeat``; ``compare_runs``)
- ``stats``          two-sample statistics in numpy, checked against scipy (``compare_samples`` -> ``Comparison``)
- ``gate``           budgets and rule checks for CI: ``parse_budget``, ``evaluate_gate`` -> ``GateResult``
                     of ``Check`` (status, outcome, numbers), ``rule_checks``, ``merge_gates`` (one gate
                     over every rank; which ranks pair up is :func:`perfdoctor.pipeline.paired_ranks`)

compare/ returns numbers and reasons — a verdict code, ``stats.Why``, a ``Mismatch``'s field,
``diff.Missing``, ``diff.NotComparable``, ``processes.BudgetJudgement`` — and imports no
formatter of perfdoctor.text; reports.diff_report and reports.gate_report word them
(tests/compare/test_words.py).

May import: pipeline, rules, analysis, collectors, bundle, profile, names, io, text, errors.
"""
