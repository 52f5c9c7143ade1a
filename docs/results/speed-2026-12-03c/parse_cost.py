import sys, time
t0 = time.process_time()
import perfdoctor.cli.analyze as A
calls = []
def fake(*a, **k):
    calls.append(time.process_time())
    raise SystemExit(0)
t1 = time.process_time()
from perfdoctor.cli import commands
t2 = time.process_time()
# replace the callback of the registered command
for ci in commands.app.registered_commands:
    if ci.name == "analyze":
        import functools
        orig = ci.callback
        @functools.wraps(orig)
        def cb(*a, **k):
            calls.append(time.process_time()); raise SystemExit(0)
        ci.callback = cb
try:
    commands.main(["analyze", "/tmp/hf80w/hf-80/trace.json", "--json", "m.json"])
except SystemExit:
    pass
print(f"import analyze {t1-t0:.3f}  commands {t2-t1:.3f}  main->callback {calls[0]-t2:.3f}  pydantic loaded {'pydantic' in sys.modules}")
