"""The run bundle's contract, in the standard library only (the bootstrap and the CI store use
it without pandas).

- ``layout``    file and folder names, the schema, making a bundle folder, atomic JSON writes
- ``manifest``  shape checks of manifest.json and the pass results before any field is read
- ``store``     the baseline store for CI: named baselines as plain files

May import: io, text, errors. The reader that turns a bundle into a Profile is
:mod:`perfdoctor.collectors.bundle`.
"""
