"""The run bundle's contract, in the standard library only (the bootstrap and the CI store use
it without pandas).

- ``layout``    file and folder names, the schema, the passes and the NVTX ranges the bootstrap
                pushes, making a bundle folder, atomic JSON writes
- ``protocol``  the typed contract across the process boundary: ``PassConfig``, ``PassResults``,
                ``LightPass`` and ``Manifest``, each with a validating ``from_json`` and ``to_json``
- ``manifest``  checking a bundle directory before it is read (``check_bundle``,
                ``read_valid_manifest``)
- ``store``     the baseline store for CI: named baselines as plain files

May import: io, text, errors. The reader that turns a bundle into a Profile is
:mod:`perfdoctor.collectors.bundle`.
"""
