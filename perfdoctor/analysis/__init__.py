"""Profile -> Analysis: the steps, the derived tables and the metric contract, one module per
question.

- ``steps``, ``ownership``  step ranges; which step every host call and GPU activity belongs to
- ``steady``                step latency arithmetic: critical path, steady state, cadence
- ``timeline``              the derived tables, built once: steps, activities, gaps, kernels
- ``metrics``               the metric contract (:class:`~perfdoctor.analysis.metrics.Analysis`,
                            metrics.json); ``analyze`` is the entry point
- ``serving``, ``capture``, ``workload``, ``comms``, ``hostgaps``  one question each: serving
  steps, CUDA-graph capture vs replay, training or inference, collectives, what the host
  did while the GPU idled
- ``ranks``                 several ranks of one job: each rank's analysis and the cross-rank view

May import: collectors, bundle, profile, schema, names, declare, io, text, errors.
"""
