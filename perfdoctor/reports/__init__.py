"""Every word and number a person reads: the findings and the analysis as terminal text,
Markdown, HTML and JSON; diffs and gates worded.

- ``format``       untrusted text as Markdown or HTML (``md_cell``, ``md_text``, ``html``), a
                   coordinate in SVG (``svg_number``); a number as text is :mod:`perfdoctor.text`'s
                   (``value``, ``count``, ``duration_us``, ...)
- ``terminal``, ``summary``, ``markdown``, ``html``, ``json``  one formatter per output
  (``json.document``: findings.json)
- ``common``       what every findings report says, worded once
- ``estimates``    an estimate's formula, and why a failure has none (rules/ hands up the numbers)
- ``evidence``     an evidence table's title, note and worded cells (``evidence_json``: its findings.json entry)
- ``attribution``, ``bounds``, ``cpu``  the sections on where step time went, what bounds
                   each kernel class, a CPU-only run's operators
- ``code``         a fix's code snippet on a console
- ``diff_report``  a diff worded: ``verdict``, ``lead_lines``, ``kernel_summary``, ``document``
                   (diff.json), ``render_markdown``, ``print_terminal``
- ``gate_report``  a gate worded: ``message`` (a check's sentence), ``headline``, ``document``
                   (gate.json), ``junit_xml``, ``summary_markdown``, ``github_annotations``, ``print_result``
- ``ranks``        a multi-rank job
- ``bundle``       the reports written into a run bundle

May import: compare, pipeline, rules, analysis, names, profile, io, text, errors, console.
"""
