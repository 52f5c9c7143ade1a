"""Statistical profile of the serial part (profile_of's start to exit): SIGPROF every 0.5 ms of CPU, stacks appended to a file."""
import sys, os, signal, time, collections
out = sys.argv[2]
sys.argv = ["perfdoctor", "analyze", sys.argv[1], "--json", "/tmp/s3/sp/s-m.json"]
from perfdoctor.collectors import kineto_tables
stacks = []
def handler(sig, frame):
    st = []
    while frame is not None:
        c = frame.f_code
        st.append(f"{c.co_filename.split('site-packages/')[-1].split('wt-speed3/')[-1].split('/tmp/s3/')[-1].split('/',1)[-1]}:{c.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    stacks.append(st)
orig = kineto_tables.profile_of
def profile_of(*a, **k):
    signal.signal(signal.SIGPROF, handler)
    signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
    return orig(*a, **k)
kineto_tables.profile_of = profile_of
real_exit = os._exit; pid = os.getpid()
def leave(code):
    if os.getpid() == pid:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        with open(out, "a") as f:
            for st in stacks: f.write(";".join(reversed(st)) + "\n")
    real_exit(code)
os._exit = leave
from perfdoctor.cli import program
program()
