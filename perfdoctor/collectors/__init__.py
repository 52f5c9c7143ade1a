"""Collectors: every reader of a tool's output into a :class:`~perfdoctor.profile.Profile`.

One module per source: the PyTorch profiler's Kineto trace (``torch_profiler``, decoded by
``kineto_events`` over ``json_chunks`` in ``forked`` children, tabled by ``kineto_tables``),
Nsight Systems (``nsys``; ``nsys_run`` runs it), Nsight Compute (``ncu``), NVML samples
(``nvml``), a perfdoctor run bundle (``bundle``, which merges them all), the shared
shape checks (``checks``) and where nsys and ncu are installed (``tools``). Which reader a path needs is decided at the door
(:func:`perfdoctor.pipeline.start_loading`), not here.

May import: bundle/ (the layout), profile, schema, names/, io, text, errors, console; and,
until step 3 of the house plan, analysis.steady (the bundle reader cuts the light pass's
steady state).
"""
