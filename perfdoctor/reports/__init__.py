"""Every word and number a person reads: the findings and the analysis as terminal text,
Markdown, HTML and JSON; diffs and gates worded.

- ``terminal``, ``summary``, ``markdown``, ``html``, ``json``  one formatter per output
- ``common``       what every findings report says, worded once
- ``code``         a fix's code snippet on a console
- ``diff_report``, ``gate_report``, ``ranks``  a diff, a gate, a multi-rank job
- ``bundle``       the reports written into a run bundle

May import: compare, pipeline, rules, analysis, names, profile, io, text, errors, console.
"""
