"""Run bundles of the reference engine recorded on a GPU, for ``perfdoctor demo`` on
machines without one.

``scripts/record-demo OUTDIR`` writes them (``perfdoctor run`` of the engine's eager,
graph and fused variants, trimmed to what the report and the diff read) together with
``headline.json``: where and when they were recorded, with which perfdoctor, and the
numbers the README quotes. Copy OUTDIR's contents here. ``tests/demo/test_show.py`` checks
that the shipped bundles still load and still give those numbers: re-record whenever
the bundle format or a metric definition changes.

Until a recording is copied here, this folder holds no ``headline.json`` and the demo
says that no recording is shipped.
"""
