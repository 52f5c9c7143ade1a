"""The table of scripts/real-programs-check: each program's own timer against perfdoctor.

    python3 scripts/real_programs_table.py RESULTS_DIR     # prints it, writes results.json

Run after every program (a check cut off by the device's time limit keeps the table of what
finished) and at the end.
"""
import json
import sys
from pathlib import Path

res = Path(sys.argv[1])


def load(path):
    try:
        text = path.read_text().strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def rc(d, what):
    try:
        return int((d / f"{what}.rc").read_text().strip())
    except (OSError, ValueError):
        return None


def own_median(result):
    """The median of the program's own per-step times (``ms_each``, its warm-up left out where
    it says how many), or None: perfdoctor's p50 compares with a median, not with the mean that
    ``ms_per_step`` is (a bursty program's differ: a checkpoint every N steps, a pool's waits)."""
    each = result.get("ms_each")
    if not isinstance(each, list) or not each or not all(isinstance(v, (int, float)) for v in each):
        return None
    warm = result.get("warmup")
    each = sorted(each[warm:] if isinstance(warm, int) and 0 <= warm < len(each) else each)
    mid = len(each) // 2
    return each[mid] if len(each) % 2 else (each[mid - 1] + each[mid]) / 2


rows = []
for d in sorted(p for p in res.iterdir() if p.is_dir()):
    own = load(d / "result.json") or {}
    m = load(d / "metrics.json") or {}
    f = load(d / "findings.json") or {}
    p50 = ((m.get("metrics") or {}).get("step_latency_ms_p50") or {})
    light = m.get("light") or {}
    findings = f.get("findings") or []
    failing = [x for x in findings if x.get("status") == "fail"]
    advisory = [x for x in findings if x.get("status") == "advisory"]
    first = failing[0]["id"] if failing else (f"({advisory[0]['id']})" if advisory else ("none" if f else "?"))
    own_ms, pd_ms = own.get("ms_per_step"), p50.get("value")
    rate = ((m.get("metrics") or {}).get("steps_per_s") or {}).get("value")
    rate_ms = 1e3 / rate if isinstance(rate, (int, float)) and rate > 0 else None  # the mean step: throughput
    # the program's own RESULT inside perfdoctor's light pass (the first pass; same process as
    # perfdoctor's numbers, so no process-to-process noise)
    light_own = light_each = light_median = None
    try:
        for line in (d / "run.log").read_text(errors="replace").splitlines():
            if line.startswith("RESULT "):
                light_result = json.loads(line[7:])
                light_own, light_each = light_result.get("ms_per_step"), light_result.get("ms_per_token_each")
                light_median = own_median(light_result)
                break
    except (OSError, ValueError):
        pass
    rows.append({
        "config": d.name,
        "command": (d / "command.txt").read_text().strip() if (d / "command.txt").exists() else None,
        "alone_rc": rc(d, "alone"), "run_rc": rc(d, "run"), "analyze_rc": rc(d, "analyze"), "report_rc": rc(d, "report"),
        "own": own,
        "own_ms_per_step": own_ms,
        "own_ms_per_step_in_light_pass": light_own,
        "step_name": m.get("step_name"),
        "steps_how": m.get("steps_how"),
        "time_source": m.get("time_source"),
        "light_steps": light.get("steps"),
        "light_steady_start": light.get("steady_start"),
        "traced_steps": len(m.get("steps") or []) if m else None,
        "step_latency_ms_p50": pd_ms,
        "step_latency_source": p50.get("source"),
        "step_latency_reason": p50.get("reason"),
        "ratio": (pd_ms / own_ms) if isinstance(pd_ms, (int, float)) and own_ms else None,
        "ratio_in_light_pass": (pd_ms / light_own) if isinstance(pd_ms, (int, float)) and light_own else None,
        "own_median_ms_in_light_pass": light_median,
        "p50_ratio_in_light_pass": (pd_ms / light_median) if isinstance(pd_ms, (int, float)) and light_median else None,
        "rate_ms_per_step": rate_ms,
        "rate_ratio_in_light_pass": (rate_ms / light_own) if rate_ms and light_own else None,
        "own_each_in_light_pass": light_each,
        "steady_reason": (m.get("light") or {}).get("steady_reason"),
        "failing": [x["id"] for x in failing],
        "first_finding": first,
    })
(res / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


def fmt(v, spec="{:.3f}"):
    return "-" if v is None else (spec.format(v) if isinstance(v, (int, float)) else str(v))


def short(s, n):
    s = "-" if s is None else str(s)
    return s if len(s) <= n else s[: n - 1] + "~"


head = (f"{'config':27} {'rc a/r/an':9} {'own ms':>9} {'step (perfdoctor)':42} {'steps l/t':>9} {'pd p50 ms':>10} "
        f"{'ratio':>7} {'own@lp':>9} {'ratio@lp':>8} {'p50@lp':>7} {'rate@lp':>7}  first finding")
print("\n== real programs: the program's own timer against perfdoctor")
print(head)
print("-" * len(head))
for r in rows:
    rcs = "/".join("-" if r[k] is None else str(r[k]) for k in ("alone_rc", "run_rc", "analyze_rc"))
    steps = f"{fmt(r['light_steps'], '{}')}/{fmt(r['traced_steps'], '{}')}"
    print(f"{r['config']:27} {rcs:9} {fmt(r['own_ms_per_step']):>9} {short(r['step_name'], 42):42} {steps:>9} "
          f"{fmt(r['step_latency_ms_p50']):>10} {fmt(r['ratio'], '{:.2f}'):>7} {fmt(r['own_ms_per_step_in_light_pass']):>9} "
          f"{fmt(r['ratio_in_light_pass'], '{:.2f}'):>8} {fmt(r['p50_ratio_in_light_pass'], '{:.2f}'):>7} "
          f"{fmt(r['rate_ratio_in_light_pass'], '{:.2f}'):>7}  {r['first_finding']}")
print("\nratio = perfdoctor step_latency_ms_p50 / the program's own ms per step (1.00: perfdoctor found the"
      " program's step and timed it right). steps l/t: light-pass steps / traced steps.\n"
      "own@lp / ratio@lp: the program's own ms per step printed inside perfdoctor's light pass, and"
      " perfdoctor's p50 over it (same process: no run-to-run noise; the program's number is mostly a mean). p50@lp:"
      " perfdoctor's p50 over the median of the program's own per-step times there (its ms_each, warm-up left out"
      " where it says), median against median. rate@lp: perfdoctor's mean step (1 / steps_per_s,"
      " the throughput) over own@lp. rc a/r/an: exit of alone / run / analyze."
      " first finding: the first failing rule (an advisory in parentheses when none fails).")
for r in rows:
    for what in ("alone", "run", "analyze", "report"):
        if r[f"{what}_rc"] not in (0, None):
            lines = [l for l in (res / r["config"] / f"{what}.log").read_text(errors="replace").splitlines() if l.strip()]
            print(f"  {r['config']}: {what} exited {r[f'{what}_rc']}: {lines[-1][:200] if lines else '(no output)'}")
    if r["own_each_in_light_pass"]:
        print(f"  {r['config']}: own ms per call in the light pass: {r['own_each_in_light_pass']}; light pass: steady from step "
              f"{r['light_steady_start']} ({r['steady_reason']})")
    if r["step_latency_reason"]:
        print(f"  {r['config']}: no step latency: {r['step_latency_reason']}")
