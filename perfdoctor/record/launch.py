"""Multi-rank runs: ``perfdoctor run`` on a ``torchrun`` job, every rank under the bootstrap.

Two ways in, one launch:

* ``perfdoctor run --nproc-per-node N SCRIPT ARGS`` launches
  ``python -m torch.distributed.run --standalone --nproc-per-node N`` itself;
* ``perfdoctor run -- torchrun [TORCHRUN OPTIONS] SCRIPT ARGS`` (or ``python -m
  torch.distributed.run ...``) keeps the user's own launch line: its options are read with
  torchrun's own argument parser, in a separate interpreter (perfdoctor's process never
  imports torch), so every option torchrun knows is understood the way torchrun reads it;
* ``perfdoctor run -- accelerate launch [OPTIONS] SCRIPT ARGS`` (Hugging Face's examples'
  line) is read by accelerate's own parser and launch code, its config file too
  (:func:`from_accelerate`): one process is a plain run with the environment accelerate gives
  the program (``ACCELERATE_MIXED_PRECISION``, ...), several on this machine (``--multi_gpu``,
  FSDP) are torchrun's ``--standalone --nproc-per-node N`` with that environment.

Either way each pass runs ``torch.distributed.run [OPTIONS] -m perfdoctor.record.bootstrap.main
CONFIG SCRIPT ARGS`` with perfdoctor's interpreter: torchrun starts one bootstrap per rank
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` in its environment), and :func:`rank_config`
points that rank's results and trace into ``raw/rank<k>/``::

    raw/<pass>.config.json      one config for every rank
    raw/<pass>.log              torchrun's and the ranks' output (all passes but the first)
    raw/rank<k>/<pass>.json     what rank k's bootstrap saw (its rank, world size, device,
                                exit code), light.json with its step series
    raw/rank<k>/torch-trace.json.gz   rank k's Kineto trace

The manifest gains ``world_size`` and ``ranks``: per rank its local rank, device, and per
pass its exit status (:func:`rank_status`); ``ranks.<k>.light_pass`` is the rank's own
light-pass summary, on the window every rank shares (rank 0's step and warm-up, so step
``i`` is the same step on every rank). A rank that fails makes torchrun stop the others
(SIGTERM, which the bootstrap turns into a clean finish: their results and traces are
written); the run's exit code is that of the rank that failed first, named in the manifest's
``failed_rank``. A rank that dies without writing results (``os._exit``, an OOM kill) is named
by the exit code torchrun saw (``raw/<pass>.torchrun.json``, :data:`RUN_TORCHRUN`). A hung
rank is ended by ``--timeout``.

This module only uses the standard library: the bootstrap imports it in every rank.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from perfdoctor.bundle.layout import write_json_atomic
from perfdoctor.bundle.protocol import NO_RESULTS, LightPass, Manifest, PassConfig, PassResults, Rank, RankStatus
from perfdoctor.errors import UsageError
from perfdoctor.record.target import parse_target

if TYPE_CHECKING:  # the analysis is not imported here: the bootstrap imports this module in every rank
    from perfdoctor.analysis.ranks import CrossRank

LAUNCHER = ("-m", "torch.distributed.run")
RANK_DIR = "rank{}"
TIMEOUT_EXIT = 124  # what timeout(1) exits with: the job did not end in time

# Read the user's torchrun options with torchrun's own parser: prints the facts as JSON.
PARSE_TORCHRUN = """
import json, sys
from torch.distributed.run import get_args_parser
argv = sys.argv[1:]
try:
    a = get_args_parser().parse_args(argv)
except SystemExit as exc:  # 2: a bad option (argparse said why on stderr); 0: --help was asked for
    sys.exit(3 if exc.code else 4)
opts = argv[: len(argv) - len(a.training_script_args) - 1]
print(json.dumps({"options": opts, "script": a.training_script, "args": a.training_script_args,
                  "module": bool(a.module), "no_python": bool(a.no_python),
                  "nproc_per_node": str(a.nproc_per_node), "nnodes": str(a.nnodes)}))
"""

# Read the user's ``accelerate launch`` line with accelerate's own parser and launch code:
# prints what its launcher would run (one process: the program and the environment accelerate
# gives it; several on this machine: torchrun's process count and the environment), as JSON.
# Exit 3: a bad option (argparse said why on stderr); 4: --help; 5: a launch perfdoctor cannot
# run (stdout says why).
PARSE_ACCELERATE = """
import json, os, sys
before = dict(os.environ)
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env
try:
    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(sys.argv[1:]))
except SystemExit as exc:
    sys.exit(3 if exc.code else 4)
gpu = not args.cpu
why = ("DeepSpeed's launcher" if args.use_deepspeed and gpu else "a TPU" if args.tpu and gpu else
       "several machines" if args.num_machines > 1 else "--no_python" if args.no_python else
       "an mpirun hostfile" if args.mpirun_hostfile else "SageMaker" if defaults is not None and
       str(defaults.compute_environment).endswith("SAGEMAKER") else None)
if why:
    print(why)
    sys.exit(5)
several = gpu and (args.multi_gpu or args.use_fsdp or args.use_megatron_lm)
env = prepare_multi_gpu_env(args) if several else prepare_simple_launcher_cmd_env(args)[1]
print(json.dumps({"env": {k: v for k, v in env.items() if before.get(k) != v and k not in ("MASTER_ADDR", "MASTER_PORT")},
                  "script": args.training_script, "args": args.training_script_args, "module": bool(args.module),
                  "nproc_per_node": str(args.num_processes) if several else None}))
"""

# torchrun itself, which also writes down every failed rank's exit code (torchrun's own
# ChildFailedError: code and time of each rank it saw fail) into the file argv[1] names, then
# fails as torchrun does. A rank that dies without writing results (``os._exit``, an OOM kill)
# leaves no other trace of its code. ``run`` is torchrun's ``main`` less its ``@record``,
# whose handler would itself fail on such a rank (it opens the rank's error file, never written).
RUN_TORCHRUN = """
import json, os, sys
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run
try:
    run(parse_args(sys.argv[2:]))
except ChildFailedError as exc:
    failures = {str(rank): {"exit_code": f.exitcode, "time_s": f.timestamp} for rank, f in exc.failures.items()}
    with open(sys.argv[1] + ".tmp", "w") as out:
        json.dump(failures, out)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    raise
"""
FAILURES = "{}.torchrun.json"  # raw/<pass>.torchrun.json: RUN_TORCHRUN's record of the failed ranks


@dataclass
class Launch:
    """How the ranks are started: torchrun's options (without the program) and the program."""

    options: list[str]  # torchrun's own options: ["--nproc-per-node", "2", "--standalone"]
    nproc_per_node: str  # as torchrun reads it: "2", "gpu", "auto"
    nnodes: str = "1"
    how: str = "--nproc-per-node"  # or "torchrun command line"

    def command(self, config: Path, target: list[str], failures: Path) -> list[str]:
        """One pass: torchrun runs ``python -m perfdoctor.record.bootstrap.main CONFIG TARGET``
        per rank, and writes the exit codes of the ranks that failed into ``failures``."""
        torchrun = [sys.executable, "-c", RUN_TORCHRUN, str(failures)]
        return [*torchrun, *self.options, "-m", "perfdoctor.record.bootstrap.main", str(config), *target]

    @property
    def world_size(self) -> int | None:
        """Ranks of the whole job, when torchrun's options fix it (N per node × nodes)."""
        if self.nproc_per_node.isdigit() and self.nnodes.isdigit():
            return int(self.nproc_per_node) * int(self.nnodes)
        return None

    def to_json(self) -> dict[str, Any]:
        return {"how": self.how, "torchrun_options": self.options, "nproc_per_node": self.nproc_per_node, "nnodes": self.nnodes}


def from_nproc(n: int) -> Launch:
    """``--nproc-per-node N``: one node, a rendezvous of its own (``--standalone`` picks a
    free port, so two jobs on one machine do not collide on 29500)."""
    if n < 1:
        raise UsageError(f"--nproc-per-node {n}: give at least 1 process")
    return Launch(["--standalone", "--nproc-per-node", str(n)], str(n))


def is_torchrun_line(argv: list[str]) -> int | None:
    """Where torchrun's options start in ``argv`` (``torchrun ...`` or ``python -m
    torch.distributed.run ...``), or None when it is not a torchrun command line."""
    if argv and os.path.basename(argv[0]) == "torchrun":
        return 1
    if len(argv) >= 3 and os.path.basename(argv[0]).startswith("python") and argv[1:3] == list(LAUNCHER):
        return 3
    return None


def is_accelerate_line(argv: list[str]) -> int | None:
    """Where ``accelerate launch``'s options start in ``argv`` (``accelerate launch ...``,
    ``accelerate-launch ...`` or ``python -m accelerate.commands.launch ...``), or None."""
    name = os.path.basename(argv[0]) if argv else ""
    if name == "accelerate" and argv[1:2] == ["launch"]:
        return 2
    if name == "accelerate-launch":
        return 1
    if len(argv) >= 3 and name.startswith("python") and argv[1:3] == ["-m", "accelerate.commands.launch"]:
        return 3
    return None


def from_accelerate(argv: list[str]) -> tuple[Launch | None, list[str], dict[str, str]]:
    """The user's ``accelerate launch [OPTIONS] SCRIPT ARGS`` line (Hugging Face's examples
    run so) as (launch, target, environment): accelerate's own parser and launch code read it,
    its config file too, in a separate interpreter. One process (its simple launcher: the
    program under this Python with ``ACCELERATE_*`` variables) is no launch; several on this
    machine (``--multi_gpu``, FSDP) are torchrun's, as accelerate starts them. The
    environment is what accelerate adds for the program."""
    start = is_accelerate_line(argv)
    assert start is not None
    done = _read_options(PARSE_ACCELERATE, argv[start:], "accelerate launch")
    if done.returncode == 5:
        raise UsageError(f"accelerate launch with {done.stdout.strip()}: perfdoctor runs one process, or torchrun's ranks "
                         "on this machine (perfdoctor run -- torchrun --nproc-per-node N SCRIPT ARGS)")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        if "No module named 'accelerate" in done.stderr:
            lines = ["accelerate is not installed for this interpreter"]
        raise UsageError(f"accelerate launch options: {(lines or ['unreadable'])[-1].partition('error: ')[2] or lines[-1]}")
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    n = facts["nproc_per_node"]
    launch = Launch(["--standalone", "--nproc-per-node", n], n, how="accelerate launch") if n is not None else None
    return launch, _target(facts), facts["env"]


def _read_options(parser: str, argv: list[str], launcher: str) -> subprocess.CompletedProcess[str]:
    """A launcher's options read by its own parser (``parser``, a snippet that prints the
    facts as JSON) in a separate interpreter: perfdoctor's process imports neither torch nor
    accelerate. Its exit status 4 (the line asks for the launcher's help) is said here."""
    try:
        done = subprocess.run([sys.executable, "-c", parser, *argv], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"the {launcher} options could not be read ({exc})") from None
    if done.returncode == 4:
        raise UsageError(f"the {launcher} line asks for its help: run {launcher} --help itself")
    return done


def _target(facts: dict[str, Any]) -> list[str]:
    """The program a launcher's line runs (its script or ``-m`` module, and their arguments)."""
    if facts["module"]:
        return ["-m", facts["script"], *facts["args"]]
    return parse_target([facts["script"], *facts["args"]], module=False)


def from_command(argv: list[str]) -> tuple[Launch, list[str]]:
    """The user's ``torchrun [OPTIONS] SCRIPT ARGS`` line as (launch, target)."""
    start = is_torchrun_line(argv)
    if start is None:
        shown = " ".join(argv[:3]) or "nothing"
        raise UsageError(f"perfdoctor run -- {shown}: expected a torchrun (or python -m torch.distributed.run) command line")
    done = _read_options(PARSE_TORCHRUN, argv[start:], "torchrun")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["torch is not installed for this interpreter?"]
        raise UsageError(f"torchrun options: {lines[-1].partition('error: ')[2] or lines[-1]}")
    facts = json.loads(done.stdout)
    if facts["no_python"]:
        raise UsageError("torchrun --no-python: perfdoctor can only run Python programs under its bootstrap")
    options = [o for o in facts["options"] if o not in ("-m", "--module")]
    return Launch(options, facts["nproc_per_node"], facts["nnodes"], "torchrun command line"), _target(facts)


# --- inside each rank (the bootstrap) ------------------------------------------------------------


def rank_config(config: PassConfig, environ: Mapping[str, str]) -> PassConfig:
    """The pass config as rank ``RANK`` uses it: its results and trace in ``raw/rank<k>/``.

    A config without ``ranks`` (a single-process run) or a process without ``RANK`` (not
    started by torchrun) is returned unchanged.
    """
    if not config.ranks or "RANK" not in environ:
        return config
    rank = int(environ["RANK"])
    folder = Path(config.results).parent / RANK_DIR.format(rank)
    folder.mkdir(parents=True, exist_ok=True)
    return replace(
        config,
        results=str(folder / Path(config.results).name),
        trace=str(folder / Path(config.trace).name) if config.trace else config.trace,
        rank={
            "rank": rank,
            "local_rank": int(environ.get("LOCAL_RANK", rank)),
            "world_size": int(environ.get("WORLD_SIZE", 1)),
            "host": os.uname().nodename,
        },
    )


def rank_device(torch: Any) -> str:
    """The device a rank worked on: ``cuda:N (name)`` once it used CUDA, else ``cpu``."""
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return "cpu"


# --- back in perfdoctor run: per-rank results and statuses -----------------------------------------


def rank_dirs(raw: Path) -> dict[int, Path]:
    """``raw/rank<k>`` folders by rank."""
    out = {}
    for p in raw.glob("rank*"):
        if p.is_dir() and p.name[4:].isascii() and p.name[4:].isdigit():
            out[int(p.name[4:])] = p
    return dict(sorted(out.items()))


def gather(raw: Path, pass_name: str) -> dict[int, PassResults | None]:
    """Per rank, what its bootstrap wrote for ``pass_name`` (None for a rank that died
    before writing: killed, or never started)."""
    out: dict[int, PassResults | None] = {}
    for rank, folder in rank_dirs(raw).items():
        path = folder / f"{pass_name}.json"
        try:  # a regular file only (a FIFO planted there would block): the standard library's check, see the module docstring
            out[rank] = PassResults.from_json(json.loads(path.read_text()), str(path)) if stat.S_ISREG(os.stat(path).st_mode) else None
        except (OSError, ValueError, RecursionError, UsageError):
            out[rank] = None
    return out


def ended_ranks(raw: Path, pass_name: str) -> tuple[list[int], list[int]]:
    """(the ranks whose program ended in ``pass_name``: their results are written, those
    still running), of the ranks that started (their ``raw/rank<k>``)."""
    ended, running = [], []
    for rank, folder in rank_dirs(raw).items():
        try:
            done = stat.S_ISREG(os.stat(folder / f"{pass_name}.json").st_mode)
        except OSError:
            done = False
        (ended if done else running).append(rank)
    return ended, running


def torchrun_failures(raw: Path, pass_name: str) -> dict[int, dict[str, Any]]:
    """Per rank torchrun saw fail in ``pass_name``: its exit code (negative: killed by that
    signal) and when, in whole seconds (:data:`RUN_TORCHRUN`); ``{}`` when none failed."""
    path = raw / FAILURES.format(pass_name)
    try:  # a regular file only, as in gather
        doc = json.loads(path.read_text()) if stat.S_ISREG(os.stat(path).st_mode) else {}
    except (OSError, ValueError, RecursionError):
        return {}
    out = {}
    for key, entry in (doc.items() if isinstance(doc, dict) else ()):
        if key.isascii() and key.isdigit() and isinstance(entry, dict) and type(entry.get("exit_code")) is int:
            out[int(key)] = {"exit_code": entry["exit_code"], "time_s": entry.get("time_s") if type(entry.get("time_s")) is int else None}
    return out


def rank_status(results: PassResults | None, torchrun: dict[str, Any] | None = None, stopped: str | None = None) -> RankStatus:
    """One rank's end in one pass, from its results: ``ok``, ``exited N``, ``raised ...``,
    ``terminated`` (SIGTERM: torchrun stopping it after another rank failed, or the
    timeout), ``stopped ...`` (--duration ended the pass: ``stopped``, the pass's) or
    ``no results`` (it died before the bootstrap could write: killed), with the exit code
    torchrun saw (``torchrun``: :func:`torchrun_failures`' entry for the rank)."""
    if results is None:
        seen = torchrun or {}
        code = seen.get("exit_code")
        how = "unknown exit" if code is None else f"killed by signal {-code}" if code < 0 else f"exit {code}"
        return RankStatus(f"{NO_RESULTS} (the rank died before writing them: {how}, as torchrun saw it)" if torchrun else
                          f"{NO_RESULTS} (the rank died before writing them: killed, or it never started)",
                          code, torchrun_time_s=seen.get("time_s"))
    code = results.exit_code
    if stopped:  # every rank at once, its DataLoader workers too: one may raise as they go first
        status = f"stopped {stopped}"
    elif results.terminated:
        status = "terminated (SIGTERM: torchrun stopped it after another rank failed, or the run timed out)"
    elif results.program_error:
        status = f"raised {results.program_error}"
    elif code not in (0, None):
        status = f"exited {code}"
    else:
        status = "ok"
    return RankStatus(status, code, ended_at_ns=results.ended_at_ns)


def record_pass(manifest: Manifest, pass_name: str, per_rank: dict[int, PassResults | None],
                torchrun: dict[int, dict[str, Any]] | None = None, stopped: str | None = None) -> None:
    """``manifest.ranks``: each rank's facts (from its first results) and its status in
    ``pass_name`` (``torchrun``: :func:`torchrun_failures`, the code of a rank that wrote none;
    ``stopped``: --duration ended the pass)."""
    torchrun = torchrun or {}
    if manifest.ranks is None:
        manifest.ranks = {}
    ranks = manifest.ranks
    for rank in torchrun.keys() - per_rank.keys():  # died before making its folder
        per_rank = {**per_rank, rank: None}
    for rank, results in per_rank.items():
        # what the entry holds stays: the facts are those of the first results the rank wrote
        entry = Rank.from_json({**((results and results.rank) or {}), **ranks.get(str(rank), Rank(rank).to_json())})
        if results and results.device and entry.device is None:
            entry.device = results.device
        entry.passes[pass_name] = rank_status(results, torchrun.get(rank), stopped).to_json()
        ranks[str(rank)] = entry.to_json()
    sizes = {size for size in (Rank.from_json(e).world_size for e in ranks.values()) if isinstance(size, int)}
    if len(sizes) == 1:
        manifest.world_size = sizes.pop()


def failed_rank(manifest: Manifest, pass_name: str) -> tuple[int, int | None] | None:
    """(rank, exit code) of the rank that failed first in ``pass_name`` (earliest end, by
    the wall clock its results carry): the root cause, not a rank that failed after it
    (a peer of a dead rank fails its next collective) or that torchrun stopped.

    A rank that died without writing results (``os._exit``, an OOM kill) while others wrote
    theirs is the root cause: its peers ended after it (they failed or were stopped because
    it was gone). Its code is the one torchrun saw (:func:`torchrun_failures`); among several
    such ranks the first torchrun saw fail, one it did not stop (SIGTERM) before one it did.
    None when torchrun did not say (the caller keeps torchrun's own code)."""
    failed = []
    silent = []
    for key, entry in (manifest.ranks or {}).items():
        status = RankStatus.from_json((Rank.from_json(entry).passes or {}).get(pass_name) or {})
        code = status.exit_code
        if status.no_results():
            seen = status.torchrun_time_s
            silent.append((code == -signal.SIGTERM, seen is None, seen or 0, int(key), code))
            continue
        if isinstance(code, int) and code != 0 and not str(status.status).startswith(("terminated", "stopped")):
            failed.append((status.ended_at_ns or 0, int(key), code))
    if silent and len(silent) < len(manifest.ranks or {}):
        return min(silent)[3:]
    return min(failed)[1:] if failed else None


def rank_lights(
    manifest: Manifest, per_rank: dict[int, PassResults | None], summarize: Callable[[PassResults, int], LightPass],
    first: LightPass, raw: Path, carries: Callable[[LightPass, PassResults], bool], primary: PassResults | None = None,
) -> None:
    """``ranks.<k>.light_pass``: each rank's light-pass summary over the window every rank
    shares: rank 0's warm-up (``first`` is rank 0's summary), so step ``i`` of the steady
    state is the same step on every rank. The rank's own steady start is kept as
    ``own_steady_start``. ``summarize(results, warmup)`` is :func:`perfdoctor.record.light.light_summary`;
    where it rewrote the rank's series (``carries``: :func:`perfdoctor.record.light.carries_series`),
    the rank's light.json is written again with it, as rank 0's raw/light.json is (before,
    only for a module step: DDP's fetch ranges were each rank's step, 0.15 ms of a 3 ms
    iteration). ``primary``: the results ``first`` summarized (rank 0's, the pass's own),
    whose series that summary rewrote already: ``first`` is its summary (summarized again,
    the rewritten series chose another step: DistributedDataParallel.forward for the
    optimizer step, and the ranks table had no step time for rank 0)."""
    warmup = int(first.warmup or 0)
    for rank, results in per_rank.items():
        if results is None:
            continue
        own = first if results is primary else summarize(results, warmup)
        summary = replace(
            own,
            own_steady_start=own.steady_start,
            warmup_explicit=bool(first.warmup_explicit),
            steady_start=warmup,
            steady_reason=f"rank 0's window: warm-up {warmup} ({first.warmup_reason or 'rank 0'}), the same steps on every rank",
            warmup_reason="rank 0's, so every rank's steady steps are the same steps",
        )
        entry = Rank.from_json(manifest.ranks[str(rank)])  # type: ignore[index]
        entry.light_pass = summary.to_json()
        manifest.ranks[str(rank)] = entry.to_json()  # type: ignore[index]
        if carries(summary, results):  # the iteration's series joins the named ones (see passes.light_pass)
            write_json_atomic(raw / RANK_DIR.format(rank) / "light.json", results.to_json())


def trace_status(per_rank: dict[int, PassResults | None], raw: Path, trace_name: str, status_of: Callable[[PassResults | None, Path], str]) -> tuple[str, list[str]]:
    """The torch collector's status over every rank (``ok`` when every rank's is) and the
    trace files written; ``status_of(results, trace)`` is one rank's status."""
    statuses, files = {}, []
    for rank, results in per_rank.items():
        trace = raw / RANK_DIR.format(rank) / trace_name
        statuses[rank] = status_of(results, trace)
        if trace.exists():
            files.append(str(trace.relative_to(raw.parent)))
    if not statuses:
        return "failed: no rank wrote results (did torchrun start the job? see the pass's output)", files
    bad = {r: s for r, s in statuses.items() if s != "ok"}
    if not bad:
        return "ok", files
    return "failed: " + "; ".join(f"rank {r}: {s.removeprefix('failed: ')}" for r, s in bad.items()), files


def unsupported(reasons: dict[str, str | None]) -> dict[str, str | None]:
    """Collectors a multi-rank run does not run yet, with why (Nsight under torchrun would
    need one report per rank: profile a single rank with nsys instead)."""
    why = "not run on a multi-rank job yet: profile one rank's command under {} by hand"
    return {c: reasons.get(c) or why.format(c) for c in ("nsys", "ncu")}


def write_cross_rank(bundle: Path, view: CrossRank) -> None:
    """``ranks.json`` (``perfdoctor.ranks/1``, :mod:`perfdoctor.analysis.ranks`) beside the rank-0
    ``metrics.json``: the view across ranks the door measured
    (:attr:`perfdoctor.pipeline.Diagnosis.cross_rank`, :func:`perfdoctor.record.run.write_metrics`)."""
    from perfdoctor.io import write_json

    write_json(bundle / "ranks.json", view.to_json())
