"""Rules: thresholds with citations, evaluated against an Analysis and ranked.

    from perfdoctor.rules.engine import evaluate, load_rules
    findings = evaluate(load_rules(["mine.toml"], ["dram-bandwidth=0.8"]), analysis)

(loading, analysing and evaluating a trace in one call is :func:`perfdoctor.pipeline.diagnose`)

``engine`` loads and checks TOML packs (``packs/seed.toml`` is the default) and evaluates
them; ``signals`` computes rule inputs beyond the metric contract and takes a multi-rank
job's cross-rank numbers (``evaluate(rules, analysis, cross_rank)``); ``evidence`` collects
the rows of the trace that explain a failure; ``estimates`` says how much time per step
a fix should win back; ``reasons`` says why a finding is not evaluated (codes and
numbers, worded in reports/); ``kernels`` makes kernel names readable; ``cli`` holds the
``rules`` and ``report`` commands. The pack format and findings.json: docs/rules.md.

May import: analysis, collectors, profile, names, io, text, errors.
"""
