import os, subprocess, sys, time, statistics
PY="/work/main/.venv/bin/python"
res={"editable":[], "pythonpath":[]}
for i in range(8):
    for name in (["editable","pythonpath"] if i%2==0 else ["pythonpath","editable"]):
        env=dict(os.environ, COLUMNS="120")
        if name=="pythonpath": env["PYTHONPATH"]="/work/main"
        t=time.perf_counter()
        subprocess.run([PY,"-m","perfdoctor","analyze","/tmp/hf80w/hf-80/trace.json","--json","/tmp/q/pp.json"],env=env,cwd="/tmp",capture_output=True)
        res[name].append(time.perf_counter()-t)
for k,v in res.items(): print(k, "median %.3f least %.3f"%(statistics.median(v),min(v)), [round(x,2) for x in v])
print(os.getloadavg())
