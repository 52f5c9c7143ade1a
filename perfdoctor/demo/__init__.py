"""``perfdoctor demo``: what perfdoctor finds, on the bundled reference engine.

- ``show``  the demo itself: the recorded bundles (``data/``) on a machine without a GPU,
            a live run of the engine where there is one
- ``data/`` run bundles recorded on an H200 by ``scripts/record-demo``

May import every room but cli.
"""
