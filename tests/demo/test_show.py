"""perfdoctor demo: the README's first command.

On a machine without a GPU the demo shows a recording made on a GPU (shipped in
perfdoctor/demo/data by scripts/record-demo), then a live run on this CPU. Tested here:

* the shipped recording, when there is one, still loads with this perfdoctor and still
  gives the numbers headline.json records and the README quotes (else: re-record);
* the demo's output with a GPU recording: a failing check with its measured value and the
  diff's speed-up line — on bundles made from the real H200 traces in tests/fixtures, and
  on the shipped recording when there is one;
* scripts/record-demo --headline-only with and without a megakernel bundle beside the
  shipped ones (a copy of the fused one stands in until the real one is recorded): without
  it the headline is the shipped one, with it the demo shows the megakernel and the
  fused → megakernel diff;
* scripts/record-demo --cpu end to end, and the whole demo on that test recording: the
  recorded part is marked as recorded, the live CPU run shows its step latency;
* without a recording the demo says so;
* every line fits 80 columns;
* (slow, opt-in) the README's first command, exactly as written, in a fresh venv.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from perfdoctor.demo import show as demo

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
SHIPPED, SHIPPED_WHY = demo.find_recording(ROOT / "perfdoctor" / "demo" / "data")


def recorded_env(root: Path) -> dict[str, str]:
    return {demo.DEMO_DATA_ENV: str(root)}


def assert_fits(text: str, width: int = demo.WIDTH) -> None:
    long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not long, f"{len(long)} lines wider than {width} columns, e.g. {long[0]!r}"


def fake_bundle(dst: Path, trace: Path) -> None:
    """A run bundle around a real H200 Kineto trace (no light pass, no NVML): what the
    demo's renderers need, made without a GPU. For tests only; never shipped."""
    (dst / "raw").mkdir(parents=True)
    shutil.copy(trace, dst / "raw" / "torch-trace.json.gz")
    manifest = {
        "schema": "perfdoctor.run/1",
        "status": "done",
        "exit_code": 0,
        "step": demo.STEP,
        "started_at": "2026-11-29T12:00:00Z",
        "gpu": {"name": "NVIDIA H200", "driver_version": "580.159.04"},
        "environment": {"torch": "2.11.0+cu130", "python": "3.11"},
        "collectors": {"torch": {"status": "ok", "files": ["raw/torch-trace.json.gz"]}},
    }
    (dst / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def h200_recording(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("h200-recording")
    runs = [("eager", ["--variant", "eager", "--tokens", "48"]), ("graph", ["--variant", "graph", "--tokens", "48"])]
    fake_bundle(root / "eager", FIXTURES / "h200-decode-eager-5steps.kineto.json.gz")
    fake_bundle(root / "graph", FIXTURES / "h200-decode-graph-10steps.kineto.json.gz")
    demo.write_headline(root, "gpu", runs, [("eager", "graph")], "tests/demo/test_show.py (fixture bundles)")
    return root


def check_recorded_output(out: str, headline: dict) -> None:
    """The demo's output shows the recorded findings and the diff's speed-up."""
    assert "Recorded, not live" in out
    assert re.search(r"recorded on an? .+ on \d{4}-\d\d-\d\d with perfdoctor ", " ".join(out.split()))
    first = headline["runs"][0]["label"]
    top = headline["numbers"]["runs"][first]["top"]
    assert top is not None, "the first recorded run has no failing check"
    flat = " ".join(out.split())
    assert re.search(rf"1\. \[\w+\] {re.escape(top['rule'])} — ", flat), "the top finding is not ranked first"
    assert f"{top['metric']} = " in flat  # ... with its measured value
    assert "target " in flat
    for d in headline["numbers"]["diffs"]:
        assert f"recorded diff: {d['before']} → {d['after']}" in out
        if d["verdict"] == "lower":
            assert demo.speedup_words(d["speedup"]) in flat
    assert_fits(out)


def test_demo_shows_a_gpu_recordings_findings_and_speedup(h200_recording: Path) -> None:
    headline = json.loads((h200_recording / demo.HEADLINE).read_text())
    eager = headline["numbers"]["runs"]["eager"]
    assert eager["verdict"] == "fail" and "launches-per-step" in eager["failing"]
    d = headline["numbers"]["diffs"][0]
    assert d["sample"] == "step_latency_ms" and d["verdict"] == "lower" and d["speedup"] > 2
    assert "launches-per-step" in d["fixed"]
    r = run_cli("demo", "--recorded", env=recorded_env(h200_recording), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    check_recorded_output(r.stdout, headline)
    assert "launches_per_step = " in r.stdout
    assert "not a CPU TEST RECORDING" not in r.stdout and "CPU TEST RECORDING" not in r.stdout


def test_headline_numbers_are_recomputed_the_same(h200_recording: Path) -> None:
    rec, why = demo.find_recording(h200_recording)
    assert rec is not None, why
    numbers, _, _ = demo.measure(rec.root, rec.labels, rec.pairs)
    assert_same_numbers(numbers, rec.headline["numbers"])
    assert rec.headline["readme"] == demo.readme_quotes(rec.headline["numbers"])
    assert "eager → graph: " in rec.headline["readme"][0] and "x faster)" in rec.headline["readme"][0]


def assert_same_numbers(now: dict, recorded: dict) -> None:
    """Numbers equal to 6 significant digits, lists and words exactly."""

    def walk(a, b, where):
        if isinstance(b, float) and isinstance(a, (int, float)):
            assert a == pytest.approx(b, rel=1e-6), f"{where}: now {a}, recorded {b}"
        elif isinstance(b, dict):
            assert isinstance(a, dict) and set(a) == set(b), f"{where}: keys {sorted(a)} vs {sorted(b)}"
            for k in b:
                walk(a[k], b[k], f"{where}.{k}")
        elif isinstance(b, list):
            assert isinstance(a, list) and len(a) == len(b), f"{where}: {a} vs {b}"
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        else:
            assert a == b, f"{where}: now {a!r}, recorded {b!r}"

    walk(json.loads(json.dumps(now)), recorded, "numbers")


# --- the shipped recording ------------------------------------------------------------------

needs_shipped = pytest.mark.skipif(SHIPPED is None, reason=f"no recording shipped yet: {SHIPPED_WHY}")


@needs_shipped
def test_shipped_recording_loads_and_reproduces_the_quoted_numbers() -> None:
    """Fails when the bundle format or a metric definition changed since the recording:
    re-record with scripts/record-demo on the H200 and update the README's quotes."""
    from perfdoctor.bundle.layout import SCHEMA as BUNDLE_SCHEMA
    from perfdoctor.analysis.metrics import SCHEMA as METRICS_SCHEMA

    assert SHIPPED is not None
    h = SHIPPED.headline
    assert h["mode"] == "gpu", "a CPU test recording (record-demo --cpu) is shipped: record on the H200"
    assert h["bundle_schema"] == BUNDLE_SCHEMA and h["metrics_schema"] == METRICS_SCHEMA
    for label in SHIPPED.labels:
        manifest = json.loads((SHIPPED.root / label / "manifest.json").read_text())
        assert manifest["schema"] == BUNDLE_SCHEMA
        metrics = json.loads((SHIPPED.root / label / "metrics.json").read_text())
        assert metrics["schema"] == METRICS_SCHEMA
    numbers, _, _ = demo.measure(SHIPPED.root, SHIPPED.labels, SHIPPED.pairs)
    assert_same_numbers(numbers, h["numbers"])
    quotes = demo.readme_quotes(h["numbers"])
    assert quotes and h["readme"] == quotes
    readme = " ".join(README.read_text().split())
    missing = [q for q in quotes if q not in readme]
    assert not missing, f"README does not quote {missing} (from perfdoctor/demo/data/headline.json)"
    labels = SHIPPED.labels
    variants = f"{', '.join(labels[:-1])} and {labels[-1]}"
    chain = " → ".join([SHIPPED.pairs[0][0], *(a for _, a in SHIPPED.pairs)])
    listed = f"the ranked findings of the {variants} variants and the diffs {chain}."
    assert listed in readme, f"README's demo paragraph does not say {listed!r}"
    size = sum(f.stat().st_size for f in SHIPPED.root.rglob("*") if f.is_file())
    assert size < 6e6, f"demo_data is {size / 1e6:.1f} MB: trim it"


@needs_shipped
def test_demo_shows_the_shipped_recording() -> None:
    assert SHIPPED is not None
    r = run_cli("demo", "--recorded", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    check_recorded_output(r.stdout, SHIPPED.headline)
    assert "NVIDIA H200" in r.stdout


def headline_only(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "record-demo"), "--headline-only", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def shipped_copy(root: Path) -> Path:
    assert SHIPPED is not None
    for label in SHIPPED.labels:
        shutil.copytree(SHIPPED.root / label, root / label)
    return root


@needs_shipped
def test_headline_only_without_a_megakernel_bundle_rewrites_the_shipped_headline(tmp_path: Path) -> None:
    """The shipped bundles predate the megakernel: re-deriving their headline keeps them."""
    assert SHIPPED is not None
    root = shipped_copy(tmp_path)
    r = headline_only(root)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rec, why = demo.find_recording(root)
    assert rec is not None, why
    assert rec.labels == SHIPPED.labels and rec.pairs == SHIPPED.pairs
    assert_same_numbers(rec.headline["numbers"], SHIPPED.headline["numbers"])


@needs_shipped
def test_demo_shows_a_recorded_megakernel(tmp_path: Path) -> None:
    """With the megakernel's bundle beside the others (recorded on the H200 a day after
    them), the headline re-derived from the bundles and the demo have its run and its diff."""
    assert SHIPPED is not None
    root = shipped_copy(tmp_path)
    assert (root / "megakernel" / "manifest.json").is_file()
    r = headline_only(root)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rec, why = demo.find_recording(root)
    assert rec is not None, why
    assert rec.labels == ["eager", "graph", "fused", "megakernel"]
    assert rec.pairs[-1] == ("fused", "megakernel") and rec.args("megakernel")[:2] == ["--variant", "megakernel"]
    assert set(rec.headline["numbers"]["runs"]) == set(rec.labels)
    assert rec.headline["readme"][-1].startswith("fused → megakernel: ")
    r = run_cli("demo", "--recorded", env=recorded_env(root), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    check_recorded_output(r.stdout, rec.headline)
    assert "recorded: megakernel (the whole step as one persistent CUDA kernel)" in r.stdout
    assert "perfdoctor run -m perfdoctor.engine --variant megakernel " in " ".join(r.stdout.split())


# --- record-demo --cpu and the whole demo on this CPU --------------------------------------


@pytest.fixture(scope="module")
def cpu_recording(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("cpu-recording") / "rec"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "record-demo"), "--cpu", "--tokens", "12", "--warmup", "2", "--steps", "6", "--tar", str(out.with_suffix(".tar")), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "CPU test recording: do not copy it" in r.stdout
    with tarfile.open(out.with_suffix(".tar")) as tar:  # what comes back from the GPU machine
        names = set(tar.getnames())
    assert {"./headline.json", "./eager/manifest.json", "./eager-again/raw/torch-trace.json.gz"} <= names
    return out


def test_record_demo_cpu_writes_trimmed_bundles_and_headline(cpu_recording: Path) -> None:
    rec, why = demo.find_recording(cpu_recording)
    assert rec is not None, why
    h = rec.headline
    assert h["mode"] == "cpu" and rec.labels == ["eager", "eager-again"] and rec.pairs == [("eager", "eager-again")]
    assert h["steps"] == 6 and h["tokens"] == 12
    for label in rec.labels:
        files = {str(p.relative_to(cpu_recording / label)) for p in (cpu_recording / label).rglob("*") if p.is_file()}
        assert {"manifest.json", "metrics.json", "raw/light.json", "raw/torch.json", "raw/torch-trace.json.gz"} <= files
        assert not any(f.endswith(".log") for f in files)
        # the light pass's window: --steps (perfdoctor 0.1) or every steady step (metric contract v2)
        assert h["numbers"]["runs"][label]["light_steps"] >= 6
        data = (cpu_recording / label / "raw" / "torch-trace.json.gz").read_bytes()
        assert gzip.decompress(data)  # recompressed, still a valid trace
    numbers, _, _ = demo.measure(rec.root, rec.labels, rec.pairs)
    assert_same_numbers(numbers, h["numbers"])


def test_demo_on_cpu_shows_the_recording_then_a_live_run(cpu_recording: Path, tmp_path: Path) -> None:
    r = run_cli("demo", "--out", tmp_path / "runs", "--steps", "4", cwd=tmp_path, env=recorded_env(cpu_recording), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    flat = " ".join(out.split())
    assert "no NVIDIA GPU on this machine" in flat
    assert "CPU TEST RECORDING" in out  # a test recording is never passed off as the real one
    assert "recorded diff: eager → eager-again" in out
    assert out.index("Recorded, not live") < out.index("Live, on this machine")
    m = re.search(r"live step latency on this CPU: p50 ([\d.]+) ms \(light pass, no tracer, (\d+) steps\)", flat)
    assert m and float(m.group(1)) > 0 and int(m.group(2)) >= 4
    assert re.search(r"torch\s+ok", out)
    assert re.search(r"nsys\s+unavailable: ", out)
    (bundle,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["collectors"]["torch"]["status"] == "ok"
    assert_fits(out)


def test_demo_says_when_no_recording_is_shipped(tmp_path: Path) -> None:
    r = run_cli("demo", "--recorded", env=recorded_env(tmp_path), timeout=120)
    assert r.returncode == 1
    assert "no recording is shipped with this perfdoctor" in " ".join(r.stdout.split())


def test_not_evaluated_reasons_fold_into_what_would_collect_them() -> None:
    assert demo.short_how("perfdoctor run --collect ncu (lts__t_sector_hit_rate.pct)") == "perfdoctor run --collect ncu"
    assert demo.short_how("a step that declares bytes (perfdoctor.declare) on a device (x (y))") == "a step that declares bytes on a device"


# --- the README's first command, in a fresh virtual environment ----------------------------


def readme_first_command() -> str:
    text = README.read_text()
    block = re.search(r"```bash\n(.*?)\n```", text, re.S)
    assert block, "README has no bash block"
    return block.group(1).strip()


@pytest.mark.slow
def test_readme_first_command_in_a_fresh_venv(tmp_path: Path, request) -> None:
    """python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e . &&
    perfdoctor demo, in a copy of the repository. Reinstalls torch: ~3 minutes on the
    2-core CI machine, so it runs only when asked for (pytest -m slow, or
    PERFDOCTOR_SLOW_TESTS=1)."""
    if "slow" not in (request.config.getoption("-m") or "") and not os.environ.get("PERFDOCTOR_SLOW_TESTS"):
        pytest.skip("slow (reinstalls torch in a fresh venv): run with -m slow or PERFDOCTOR_SLOW_TESTS=1")
    command = readme_first_command()
    assert command.startswith("python3 -m venv .venv") and command.endswith("perfdoctor demo")
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", demo.DEMO_DATA_ENV)}
    env["COLUMNS"] = "200"
    # pip byte-compiles what it installs, on one CPU: much of this test's time, which what it
    # checks (the command installs, the demo runs) does not depend on (.ci/run skips it too).
    # "0": pip stores the variable's boolean in --no-compile's destination, `compile`, so "1"
    # compiles (pip 23.2: 65 __pycache__ folders for monai's wheel with "1", none with "0")
    env["PIP_NO_COMPILE"] = "0"
    r = subprocess.run(["bash", "-c", command], cwd=repo, capture_output=True, text=True, timeout=1500, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert (repo / ".venv" / "bin" / "perfdoctor").exists()
    flat = " ".join(r.stdout.split())
    assert "live step latency on this CPU: p50 " in flat
    if SHIPPED is not None:
        # pip's own lines come first on the same stdout; the demo's output starts at its banner.
        check_recorded_output(r.stdout[r.stdout.index("Recorded, not live") :], SHIPPED.headline)
    else:
        assert "no recording is shipped with this perfdoctor" in flat


def test_plan_profiles_the_four_variants_on_a_gpu() -> None:
    runs, pairs = demo.plan("gpu")
    assert [label for label, _ in runs] == ["eager", "graph", "fused", "megakernel"]
    assert pairs == [("eager", "graph"), ("graph", "fused"), ("fused", "megakernel")]
    for label, args in runs:
        assert args[:2] == ["--variant", label] and "--tokens" in args and args[args.index("--tokens") + 1] == "48"
        assert args[args.index("--device") + 1] == "cuda" and args[args.index("--config") + 1] == "llama-3.2-1b"
    runs, pairs = demo.plan("gpu", megakernel=False)  # not a Hopper GPU
    assert [label for label, _ in runs] == ["eager", "graph", "fused"]
    assert pairs == [("eager", "graph"), ("graph", "fused")]


@pytest.mark.gpu
def test_demo_live_on_the_gpu(tmp_path: Path) -> None:
    """On the H200 (scripts/gpu-check): eager, graph, fused and megakernel live (elsewhere
    the megakernel is skipped, saying why); graph beats eager."""
    from perfdoctor.engine.megakernel import unsupported_gpu
    from perfdoctor.record.tools import gpu_present

    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")
    why_not = unsupported_gpu()
    labels = ["eager", "graph", "fused", *([] if why_not else ["megakernel"])]
    r = run_cli("demo", "--out", tmp_path / "runs", "--steps", "6", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    flat = " ".join(r.stdout.split())
    assert f"profiling the bundled engine live on this GPU ({', '.join(labels)})" in flat
    for label in labels:
        assert f"live: {label} (" in r.stdout
    for before, after in zip(labels, labels[1:]):
        assert f"live diff: {before} → {after}" in r.stdout
    assert ("megakernel skipped: it " in flat) == bool(why_not)
    m = re.search(r"live diff: eager → graph.*?ms per step, ([\d.]+)x faster", flat)
    assert m and float(m.group(1)) > 1.5, flat[-3000:]
    assert len(list((tmp_path / "runs").iterdir())) == len(labels)
    assert_fits(r.stdout)
