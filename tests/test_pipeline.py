"""The front door (``perfdoctor.diagnose``) and the CLI's shared options, in-process.

The commands run through typer's ``CliRunner`` on the real app: fast, and the same code
path as ``perfdoctor ...`` short of the process (exit codes of the process itself are
checked by the subprocess tests in test_analyze.py, test_gate.py and test_hostile.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import perfdoctor
from conftest import FIXTURES
from perfdoctor.cli.commands import app
from perfdoctor.errors import UsageError
from perfdoctor.pipeline import Diagnosis, diagnose, pack_files

EAGER = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
STEP = "decode_step"


@pytest.fixture(scope="module")
def eager() -> Diagnosis:
    return perfdoctor.diagnose(EAGER, step=STEP)


def test_diagnose_is_load_analyze_and_rules(eager: Diagnosis) -> None:
    assert isinstance(eager, Diagnosis) and perfdoctor.Diagnosis is Diagnosis
    assert eager.analysis.profile is eager.profile
    assert eager.analysis.steps.name == STEP
    assert eager.findings and eager.findings[0].status == "fail"
    assert eager.packs == ["seed (built in)"]


def test_diagnose_is_defined_once_and_what_it_replaced_is_gone() -> None:
    """``grep -rn "def diagnose" perfdoctor`` finds one line (house plan step 2's acceptance),
    and no module defines diff.Run, load_run, diagnose_run or diagnose_ranks (demo/show.analyse
    is left: it names a bundle's Diagnosis for the demo, through the door)."""
    import ast

    package = Path(perfdoctor.__file__).parent
    defined: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, []).append(path.relative_to(package).as_posix())
    assert defined["diagnose"] == ["pipeline.py"], defined["diagnose"]
    assert not [n for n in ("load_run", "diagnose_run", "diagnose_ranks") if n in defined]
    assert "compare/diff.py" not in defined.get("Run", []) and not (package / "compare" / "rankdiff.py").exists()
    assert defined["merge_gates"] == ["compare/gate.py"]


def test_diagnose_without_rules_has_no_findings() -> None:
    d = diagnose(EAGER, step=STEP, rules=None)
    assert d.findings is None and d.packs == []


def test_seed_names_the_built_in_pack_everywhere() -> None:
    assert pack_files(["seed", Path("seed"), "extra.toml"]) == [Path("extra.toml")]
    assert pack_files(None) == []


def test_a_bad_threshold_fails_before_the_trace_loads(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        diagnose(tmp_path / "no-such-trace.json", thresholds=["no-such-rule=1"])


def _invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=True)


def test_analyze_in_process_accepts_rules_seed(tmp_path: Path) -> None:
    out = tmp_path / "metrics.json"
    r = _invoke("analyze", EAGER, "--step", STEP, "--rules", "seed", "--json", out)
    assert r.exit_code == 0, r.output
    assert "memory-bubbles" in r.output and out.stat().st_size > 100


def test_gate_in_process_takes_a_pack_path_like_analyze(tmp_path: Path) -> None:
    pack = tmp_path / "pack.toml"
    pack.write_text("")  # an empty pack: the seed rules alone
    r = _invoke("gate", EAGER, "--step", STEP, "--rules", pack, "--min-severity", "warning")
    assert r.exit_code == 1, r.output  # the eager decode fails memory-bubbles (a warning or worse)
    assert "FAILED" in r.output


def test_shared_options_mean_one_thing() -> None:
    """--step, --tokens-per-step, --rules, --json read the same in every command that has them."""
    import typer.main

    group = typer.main.get_command(app)
    seen: dict[str, set] = {}
    for name in ("analyze", "report", "diff", "gate"):
        for p in group.commands[name].params:
            if p.name in ("rules", "threshold"):
                seen.setdefault(p.name, set()).add((p.help, getattr(p, "multiple", None)))
            elif p.name in ("step", "tokens_per_step"):
                seen.setdefault(p.name, set()).add(p.help.split(" (")[0].split(",")[0].removesuffix(" for both runs"))
    assert {k: len(v) for k, v in seen.items()} == {"rules": 1, "threshold": 1, "step": 1, "tokens_per_step": 1}, seen


def test_workload_option_overrides_the_trace_and_rejects_other_words(tmp_path) -> None:
    from conftest import FIXTURES, run_cli_inprocess

    train = FIXTURES / "wild" / "h200-train.kineto.json.gz"
    as_traced = run_cli_inprocess("analyze", train)
    forced = run_cli_inprocess("analyze", train, "--workload", "inference")
    assert as_traced.returncode == forced.returncode == 0
    assert "workload: training" in as_traced.stdout
    assert "workload: inference (set by --workload" in forced.stdout
    bad = run_cli_inprocess("analyze", train, "--workload", "bogus")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--workload" in bad.stderr


def _rank_folder(folder: Path, n: int) -> Path:
    """``n`` ranks of bench/many_ranks.py's small trace (a GEMM and an all-reduce a step)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("many_ranks", Path(__file__).parents[1] / "bench" / "many_ranks.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.build(folder, n)
    return folder


def test_a_folder_of_ranks_is_every_rank_through_the_door(tmp_path: Path) -> None:
    d = diagnose(_rank_folder(tmp_path / "ranks", 3))
    view = d.cross_rank
    assert view is not None and sorted(d.rank_findings) == [0, 1, 2] == [r.rank for r in view.runs]
    mine = next(r for r in view.runs if r.rank == d.rank)  # the Diagnosis is the report rank's
    assert d.analysis is mine.analysis and d.findings is d.rank_findings[d.rank]
    for run in view.runs:
        # the job's numbers are the rules' input, never written into a rank's Analysis
        assert not {"straggler_delay_ms", "straggler_delay_ratio", "rank_step_spread_ratio"} & set(run.analysis.metrics)
        straggler = next(f for f in d.rank_findings[run.rank] if f.rule_id == "straggler")
        assert straggler.values["straggler_delay_ratio"] is view.metrics()["straggler_delay_ratio"]


def test_paired_ranks_rank_by_rank_else_the_lowest(tmp_path: Path) -> None:
    from perfdoctor.bundle.protocol import Manifest
    from perfdoctor.pipeline import Source, open as open_source, paired_ranks

    def bundle(*ranks: int) -> Source:
        return Source(tmp_path, Manifest(ranks={str(k): {} for k in ranks}))

    trace = Source(EAGER)
    assert paired_ranks(bundle(0, 1), bundle(0, 1)) == {0: (0, 0), 1: (1, 1)}
    assert paired_ranks(None, bundle(0, 1)) == {0: (0, 0), 1: (1, 1)}  # gate without a baseline: every rank
    assert paired_ranks(bundle(0, 1), bundle(0, 1, 2, 3)) == {None: (0, 0)}  # world sizes differ: the lowest, said not comparable
    assert paired_ranks(trace, bundle(2, 3)) == {None: (None, 2)}
    assert paired_ranks(None, trace) == {None: (None, None)}
    folder = open_source(_rank_folder(tmp_path / "ranks", 2))
    assert folder.traces and folder.several
    with pytest.raises(UsageError, match="a folder of per-rank traces"):
        paired_ranks(trace, folder)


def test_report_on_a_folder_of_ranks_writes_nothing_into_it(tmp_path: Path) -> None:
    """The report rank's findings; the report files go into a bundle only, never a user's trace folder."""
    folder = _rank_folder(tmp_path / "ranks", 2)
    before = sorted(folder.iterdir())
    r = _invoke("report", folder, "-f", "md")
    assert r.exit_code == 0, r.output
    assert sorted(folder.iterdir()) == before


def test_a_bundle_s_pass_results_are_read_once_through_the_door(monkeypatch) -> None:
    """open() checks raw/<pass>.json; the clock offset, the light pass's series and the pass
    environment take them from there (each was read up to three times)."""
    import collections

    import perfdoctor.io

    bundle = Path(perfdoctor.__file__).parent / "demo" / "data" / "megakernel"
    opened: collections.Counter[str] = collections.Counter()
    real_open = perfdoctor.io._open

    def counting(path, *args, **kwargs):
        opened[Path(path).name] += 1
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(perfdoctor.io, "_open", counting)
    d = diagnose(bundle, rules=None)
    assert opened["torch.json"] == 1 and opened["light.json"] == 1
    assert d.pass_env.get("torch") and d.profile.light is not None


def _run_metrics(bundle: Path, monkeypatch) -> tuple[list[dict], int, int]:
    """``perfdoctor run``'s last step on ``bundle``, as the runner calls it: the door's
    calls (their keywords), the analyses run and the manifest reads."""
    import json
    import types

    import perfdoctor.analysis.metrics as metrics
    import perfdoctor.io
    from perfdoctor import pipeline
    from perfdoctor.bundle.layout import write_json_atomic
    from perfdoctor.bundle.protocol import Manifest
    from perfdoctor.record.run import write_metrics

    runner = types.SimpleNamespace(bundle=bundle, manifest=Manifest.from_json(json.loads((bundle / "manifest.json").read_text())),
                                   say=lambda text: None)
    runner.save = lambda: write_json_atomic(bundle / "manifest.json", runner.manifest.to_json())
    calls: list[dict] = []
    analyses, reads = [0], [0]
    diagnose_, analyze, read_capped = pipeline.diagnose, metrics.analyze, perfdoctor.io.read_capped

    def counting_diagnose(*args, **kwargs):
        calls.append(kwargs)
        return diagnose_(*args, **kwargs)

    def counting_analyze(*args, **kwargs):
        analyses[0] += 1
        return analyze(*args, **kwargs)

    def counting_read(path, *args, **kwargs):
        reads[0] += Path(path).name == "manifest.json"
        return read_capped(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "diagnose", counting_diagnose)
    monkeypatch.setattr(metrics, "analyze", counting_analyze)
    monkeypatch.setattr(perfdoctor.io, "read_capped", counting_read)
    write_metrics(runner)
    monkeypatch.undo()
    return calls, analyses[0], reads[0]


def test_run_s_metrics_json_is_the_door_s_analysis(tmp_path: Path, monkeypatch) -> None:
    """``perfdoctor run`` writes metrics.json through pipeline.diagnose, as every command gets
    its analysis (house plan, step 2): once, without rules, the manifest read once."""
    import json
    import shutil

    from perfdoctor.io import dumps_json

    bundle = tmp_path / "megakernel"
    shutil.copytree(Path(perfdoctor.__file__).parent / "demo" / "data" / "megakernel", bundle)
    (bundle / "metrics.json").unlink()
    calls, analyses, reads = _run_metrics(bundle, monkeypatch)
    assert len(calls) == 1 and calls[0]["rules"] is None and calls[0]["traced"] and analyses == 1 and reads == 1
    # on the user's --step, as the manifest's options keep it (the demo's run named decode_step;
    # a run given none is analysed as analyze reads the bundle, on the step it recorded)
    step = json.loads((bundle / "manifest.json").read_text())["options"]["step"]
    expected = diagnose(bundle, step=step, rules=None, warnings=False).analysis.to_json()
    assert (bundle / "metrics.json").read_text() == dumps_json(expected)


def test_run_writes_no_metrics_json_for_a_bundle_without_a_trace(tmp_path: Path, monkeypatch) -> None:
    """The door says there is no trace before any analysis: the manifest says why, as before the door."""
    import json
    import shutil

    from perfdoctor.collectors.bundle import NO_TRACE

    bundle = tmp_path / "megakernel"
    shutil.copytree(Path(perfdoctor.__file__).parent / "demo" / "data" / "megakernel", bundle)
    (bundle / "metrics.json").unlink()
    (bundle / "raw" / "torch-trace.json.gz").unlink()
    calls, analyses, _ = _run_metrics(bundle, monkeypatch)
    assert len(calls) == 1 and analyses == 0 and not (bundle / "metrics.json").exists()
    assert json.loads((bundle / "manifest.json").read_text())["metrics_error"] == NO_TRACE
