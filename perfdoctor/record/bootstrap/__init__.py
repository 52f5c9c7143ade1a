"""Inside the target's interpreter: ``python -m perfdoctor.record.bootstrap.main CONFIG.json
SCRIPT ARGS...`` sets up collection (step timing, range mirroring, module steps, the
profiler window), then runs the program as ``python SCRIPT ARGS`` would.

The room, by concern: :mod:`.main` is the entry point (:func:`~.main.main`: read CONFIG,
install the hooks, run the program, write the results whatever happens); :mod:`.session`
holds one pass's state (:class:`~.session.Session`); :mod:`.clock` times the light pass's
steps (:class:`~.clock.Timer`, :class:`~.clock.StepTimes`, :class:`~.clock.GpuClock`);
:mod:`.ranges` follows and mirrors the program's ranges (:func:`~.ranges.hook_ranges`);
:mod:`.steps` turns module calls, compiled functions and ``--step-fn`` into steps
(:class:`~.steps.ModuleSteps`, :func:`~.steps.install_compiled_steps`,
:func:`~.steps.install_step_fn`). Imports go main → steps/ranges → session → clock.

Keep it light: it runs before the user's code, so it imports the standard library, torch
when the program has it, :mod:`perfdoctor.api`, :mod:`perfdoctor.declare`,
:mod:`perfdoctor.console`, the bundle's contract (:mod:`perfdoctor.bundle.layout`,
:mod:`perfdoctor.bundle.protocol`), :mod:`perfdoctor.names.ranges` and its siblings in record/
(launch, lockstep) only — never pandas or the analysis.
"""
