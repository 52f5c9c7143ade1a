"""Inside the target's interpreter: ``python -m perfdoctor.record.bootstrap.main CONFIG.json
SCRIPT ARGS...`` sets up collection (step timing, range mirroring, module steps, the
profiler window), then runs the program as ``python SCRIPT ARGS`` would.

Keep it light: it runs before the user's code, so it imports the standard library, torch
when the program has it, :mod:`perfdoctor.api`, :mod:`perfdoctor.declare`,
:mod:`perfdoctor.console` and its siblings in record/ (launch, lockstep) only — never pandas
or the analysis.
"""
