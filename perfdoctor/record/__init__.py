"""``perfdoctor run`` and the commands that measure a live machine: run the user's program
unmodified, pass by pass, into a run bundle.

- ``run``        the command: the manifest opened and closed around the passes, the exit
                 code, metrics.json; ``python -m perfdoctor.record.run`` is its entry
- ``options``    what ``perfdoctor run`` was asked (RunOptions, the collectors)
- ``target``     the program's command line, checked before it runs
- ``tools``      the GPU, and which collectors can run here (nsys and ncu by ``collectors.tools``)
- ``passes``     one function per pass (light, torch, nsys, ncu), in order
- ``runner``     one pass as a process: start, signals, --timeout, progress, its results back
- ``light``      the light pass's scout: the step, its steady state, the traced window
- ``launch``     multi-rank runs under torchrun, every rank under the bootstrap
- ``repeats``    ``run --repeat N`` and ``compare-programs``: the light pass in fresh processes
- ``lockstep``   two programs taking turns step by step on one CPU
- ``calibrate``  the GPU's measured DRAM bandwidth and matmul rate, cached
- ``doctor``     what this machine offers each collector, and why one is missing
- ``bootstrap/`` what runs inside the target's interpreter

May import every room below it: compare, pipeline, rules, analysis, collectors, bundle,
profile, names, io, text, errors, console. Never cli, demo or reports.
"""
