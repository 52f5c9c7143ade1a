"""``perfdoctor run`` and the commands that measure a live machine: run the user's program
unmodified, pass by pass, into a run bundle.

- ``run``        the passes (light timing, torch profiler, Nsight Systems, Nsight Compute)
                 and the bundle they write; ``python -m perfdoctor.record.run`` is the command
- ``launch``     multi-rank runs under torchrun, every rank under the bootstrap
- ``repeats``    ``run --repeat N`` and ``compare-programs``: the light pass in fresh processes
- ``lockstep``   two programs taking turns step by step on one CPU
- ``calibrate``  the GPU's measured DRAM bandwidth and matmul rate, cached
- ``doctor``     what this machine offers each collector, and why one is missing
- ``bootstrap/`` what runs inside the target's interpreter

May import every room below it: compare, pipeline, rules, analysis, collectors, bundle,
profile, names, io, text, errors, console. Never cli, demo or reports.
"""
