"""Range names: what the name of a host range says it is, as evidence for the step.

Standard library only: the bootstrap inside the user's program reads these too (it must
not import pandas there). :func:`kind` puts every range name in one class:

``serving``
    a serving engine's scheduler iteration (vLLM, SGLang; :func:`parse_serving`).
``compiled``
    one call of a compiled graph: inductor's ``## Call CompiledFxGraph <key> ##`` (the torch
    profiler writes it around every call of a ``torch.compile``-d graph) or the call of a
    ``torch.compile``-d function as ``perfdoctor run``'s light pass names it
    (:data:`COMPILED_PREFIX`), or of a model an AOTInductor package holds
    (:data:`AOTI_PREFIX`: ``torch._inductor.aoti_load_package``'s model, no ``nn.Module``).
    With CUDA graphs each call is one replay.
``profiler_step``
    ``ProfilerStep#N`` (torch.profiler's schedule). ``start()`` opens #0, each
    ``prof.step()`` closes #k and opens #k+1, and ``stop()`` (the ``with`` block's exit)
    closes the last: in the recipe's loop (``work(); prof.step()``) the range the last
    ``prof.step()`` opened, after the last iteration, holding none. That one is not a step
    (N iterations, N steps): the light pass's bootstrap sees ``stop()`` close it
    (:mod:`perfdoctor.record.bootstrap.ranges`), a trace shows it as the last one with
    nothing inside (:func:`perfdoctor.analysis.steps.profiler_steps`). With ``prof.step()``
    at the top of the loop it is #0 that holds none, and the exit's range the last iteration
    (:func:`perfdoctor.record.light.profiler_series`).
``replay``
    the replays of one ``torch.cuda.CUDAGraph`` as ``perfdoctor run``'s light pass names them
    (:data:`REPLAY_PREFIX` and the graph's ordinal, :func:`replay_name`): evidence for the
    step only through their count (``choose_step``'s ``replays``), never as a range of its own.
``loop``
    a range torch opens once per training-loop iteration around its own library code:
    ``enumerate(DataLoader)#<Iter>.__next__``, ``Optimizer.zero_grad#<Opt>.zero_grad``,
    ``Optimizer.step#<Opt>.step``. Each marks the iteration; none of them *is* it (the
    ``__next__`` of the data loader is the time to fetch one batch, 1.4 ms of a 90 ms
    iteration in tests/programs/real/train_loop.py).
``backward``
    :data:`BACKWARD_RANGE`: ``perfdoctor run`` names each call of ``torch.autograd.backward``
    (``loss.backward()``) so: once per iteration of a training loop, the mark of last resort
    of one written with no optimizer, no module and no data loader (Karpathy's makemore, a
    tutorial's polynomial fit: plain tensors, an update by hand); :data:`GRAD_RANGE`, each
    outermost call of ``torch.autograd.grad`` (``torch.func.grad``'s), after it.
``wrapper``
    torch's parallel wrapper around the model's forward (:data:`WRAPPER_RANGES`:
    ``DistributedDataParallel.forward``, ``DataParallel.forward``): a part of the training
    iteration, as a module call is, never ahead of the loop's ranges (a DDP training loop
    read the forward alone, 0.11 ms of a 0.6 ms iteration).
``library``
    a library's own range (cub, thrust, NCCL, gloo, cuDNN, cuBLAS, ...; torch's dynamo,
    autograd and FSDP bookkeeping): it repeats and may own GPU work, but it is never the step.
``warmup``
    a range whose name says it is warm-up (PARAM/HTA ``[param|model|0|0|0|warmup|forward]``).
``wait``
    :data:`WAIT_RANGE`: ``perfdoctor run``'s traced passes mark a thread's waits for another
    thread with it (:mod:`perfdoctor.record.bootstrap.waits`): never a step, it ends the
    iteration of a call before it (:func:`perfdoctor.analysis.steps.iteration_ranges`);
    :data:`PROCESS_WAIT_RANGE` a wait for another process's message (a DataLoader's workers'
    batch), never a step either, and no end of an iteration: a step waits for its data.
``range``
    anything else: a range the user (or the framework on the user's behalf) named.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import Iterable

SERVING = "serving"
COMPILED = "compiled"
PROFILER_STEP = "profiler_step"
REPLAY = "replay"
LOOP = "loop"
BACKWARD = "backward"
LIBRARY = "library"
WRAPPER = "wrapper"
WARMUP = "warmup"
WAIT = "wait"
RANGE = "range"

# How perfdoctor run's traced passes mark a thread's wait for another thread (a server's
# worker blocked on its request queue)
WAIT_RANGE = "perfdoctor.wait"
# ... and, inside a wait at its end, that the rest of the process worked meanwhile (at least
# WORKED_SHARE of a CPU over a wait of at least WORKED_MIN_NS): the thread waited for work
# done beside it (a producer thread filling its queue: ~1 CPU, under half of one on the
# loaded 2-CPU CI box; a process pool's workers, their CPU time counted too), which is its
# step's, not idle. A server's worker waits while the rest sleeps;
# threaded_server.py's request generator makes each request in-process, and under the
# tracer that work filled half of some 0.2-1 ms waits: hence the 1 ms floor. The light pass
# records the same verdict per wait (record/bootstrap/waits.py).
WORKED_RANGE = "perfdoctor.wait: the process worked"
# ... and a thread's wait for another process's message on a multiprocessing connection (a
# DataLoader's fetch waiting for its workers' next batch; with pin_memory=True its pinning
# thread waits so, and the fetch on that thread's queue: WAIT_RANGE): what the fetch's time
# waited, the rest taking the batch in (perfdoctor.analysis.cpu.loader_waits)
PROCESS_WAIT_RANGE = "perfdoctor.wait: another process"
WORKED_SHARE = 0.3
WORKED_MIN_NS = 1_000_000

# The serving family's step name (Steps.name, the step a run records): every serving range.
SERVING_STEP = "serving step"

# How the light pass of ``perfdoctor run`` names the calls of a torch.compile-d function
# (the torch profiler writes no range around them when it is not running).
COMPILED_PREFIX = "torch.compile: "
# ... and the calls of each model loaded from an AOTInductor package (its calls run compiled
# C++: no module call, no Python frame of the model), numbered by first call
AOTI_PREFIX = "AOTInductor: model #"
COMPILED_FX = "## Call CompiledFxGraph "
# The operators a torch.compile-d function's call records in a trace (its guard check and
# the compiled region around the graph's call), on the CPU as on a GPU
COMPILED_OPS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup")
# How the light pass names the replays of a hand-captured CUDA graph (``g.replay()``): one
# name per graph object, numbered by first replay, so one graph's replays can be counted
# apart from another's (vLLM's piecewise graphs replay many graphs per iteration).
REPLAY_PREFIX = "CUDAGraph.replay #"

# How perfdoctor run names each call of ``torch.autograd.backward`` (``Tensor.backward`` calls
# it): torch's profiler writes no range around it, only each autograd node's evaluation.
BACKWARD_RANGE = "torch.autograd.backward"
# ... and of ``torch.autograd.grad``, which ``torch.func.grad`` calls: a loop written the JAX
# way (a model that is a function of a parameter dict, ``grad_and_value``, an update by
# ``tree_map``) has nothing else that repeats per iteration
GRAD_RANGE = "torch.autograd.grad"

# Ranges that libraries open around their own calls: never the user's step. On the H200 an
# unannotated Hugging Face generate under nsys came out as "3 steps of
# cub::DeviceScan::InclusiveScan" before these were excluded. ``nccl:_all_gather_base`` is
# torch.distributed's record_function around a collective.
LIBRARY_PREFIXES = (
    "cub::", "thrust::", "cutlass::", "cute::", "at::", "c10::", "aten::", "nccl", "cudnn", "cublas",
    "cusparse", "cufft", "curand", "cusolver", "nvjet", "torchdynamo", "compiledfunction",
    "torch-compiled region", "cudagraphnode", "fsdp::", "fullyshardeddataparallel.",
    # torch.distributed's backends' collectives (gloo:all_reduce once per DDP backward)
    "gloo:", "c10d::", "mpi:", "ucc:",
    # Lightning's PyTorchProfiler: ``[pl][profile]<hook>`` around each hook and part of its
    # loops, ``[pl][module]<class>: <name>`` around each module's forward. Taken for ranges of
    # the user's, its model's forward (``[pl][module]…Sequential: net``, 0.24 ms of a 2.4 ms
    # iteration) was the step of a fit's trace; its loops' torch ranges mark the iteration.
    "[pl][",
)
WRAPPER_RANGES = frozenset({"DistributedDataParallel.forward", "DataParallel.forward"})

# torch's loop markers, best first: the data loader's fetch opens the iteration (``for batch
# in loader``), zero_grad and step come later in it.
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
# an op of the backward pass: each autograd node's evaluation, its own ops inside it
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function: "
DATA_LOADER_PREFIX = "enumerate(DataLoader)#"
LOOP_PREFIXES = (DATA_LOADER_PREFIX, "Optimizer.zero_grad#", OPTIMIZER_STEP_PREFIX)


def closes_iteration(name: str) -> bool:
    """Whether the optimizer range ``name`` ends its loop iteration: a step does (the update
    comes after the forward and the backward), a ``zero_grad`` may stand anywhere, and the
    first step of each new optimizer (``#new``, :func:`optimizer_instance`) opens its inner
    loop (Reptile's)."""
    split = parse_optimizer_instance(name)
    return name.startswith(OPTIMIZER_STEP_PREFIX) and (split is None or split[1] != NEW_OPTIMIZER)


def optimizer_others(mark: str) -> tuple[str, ...]:
    """The prefixes of the optimizer ranges that are the other marks of a loop iteration
    marked by the optimizer range ``mark`` (``steady.optimizer_loop``'s ``others``): for a
    ``zero_grad``, the optimizers' steps, which close the iteration (another optimizer's
    ``zero_grad`` closes nothing: taken for a step, a loop zeroing an SGD and an Adam at
    its start read 39 steps for 40); for a step, every other optimizer range."""
    return (OPTIMIZER_STEP_PREFIX,) if mark.startswith(LOOP_PREFIXES[1]) else LOOP_PREFIXES[1:]


PROFILER_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
PROFILER_STEP_GLOB = "ProfilerStep#*"  # the step of torch.profiler's steps, one name each
_WARMUP = re.compile(r"(?:^|[^a-z])warm_?up(?:[^a-z]|$)", re.IGNORECASE)

# vLLM's gpu_model_runner. Older: execute_context_<c>(<ct>)_generation_<g>(<gt>), where a
# token field may carry more after the count (``888_788544``). Newer (v1):
# execute_<tokens>_context_<c>(sq<q>sk<k>sqsq<..>sqsk<..>)_generation_<g>(sq<q>sk<k>...):
# sq is the sum of the requests' query tokens (what the step processes), sk their context.
VLLM = re.compile(r"^execute_(?:(\d+)_)?context_(\d+)\(([^()]*)\)_generation_(\d+)\(([^()]*)\)$")
_TOKENS = re.compile(r"^(?:sq)?(\d+)")
# SGLang's scheduler: step[<MODE> bs=<n>] with an optional toks=<m> / tokens=<m>.
SGLANG = re.compile(r"^step\[\s*([A-Za-z_]+)\s+bs=(\d+)(?:\s+(?:toks|tokens)=(\d+))?\s*\]$")

_SGLANG_KIND = {
    "decode": "decode",
    "extend": "prefill",
    "prefill": "prefill",
    "mixed": "mixed",
    "idle": "idle",
    "target_verify": "decode",
    "verify": "decode",
    "draft_extend": "prefill",
}


def _tokens(field: str) -> int:
    m = _TOKENS.match(field)
    return int(m.group(1)) if m else 0


@lru_cache(maxsize=4096)
def parse_serving(name: str) -> tuple | None:
    """``(engine, kind, batch, tokens, prefill_tokens, decode_tokens)`` of a serving step
    range's name, or None (:mod:`perfdoctor.analysis.serving` documents the names)."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    m = VLLM.match(name)
    if m:
        c, g = int(m.group(2)), int(m.group(4))
        ct, gt = _tokens(m.group(3)), _tokens(m.group(5))
        kind = "mixed" if c and g else "prefill" if c else "decode" if g else "idle"
        return ("vllm", kind, c + g, ct + gt, ct, gt)
    m = SGLANG.match(name)
    if m:
        mode, bs, toks = m.group(1).lower(), int(m.group(2)), m.group(3)
        kind = _SGLANG_KIND.get(mode)
        if kind is None:
            return None
        if kind == "decode":
            tokens = int(toks) if toks else bs
            return ("sglang", kind, bs, tokens, 0, tokens)
        if kind == "prefill":
            tokens = int(toks) if toks else bs
            return ("sglang", kind, bs, tokens, tokens, 0)
        if kind == "mixed":  # SGLang's mixed chunk: toks counts the extend part
            pre = int(toks) if toks else bs
            return ("sglang", kind, bs, pre + bs, pre, bs)
        return ("sglang", "idle", bs, 0, 0, 0)
    return None


def matches_step(name: str, step: str) -> bool:
    """A range of the step named ``step``: that name or glob, or any serving range for the
    serving family (:data:`SERVING_STEP`)."""
    if step == SERVING_STEP:
        return parse_serving(name) is not None
    return name == step or fnmatch.fnmatchcase(name, step)


def is_library(name: str) -> bool:
    return isinstance(name, str) and name.lower().startswith(LIBRARY_PREFIXES)


@lru_cache(maxsize=65536)
def kind(name: str) -> str:
    """The class of a range name (see the module docstring)."""
    if not isinstance(name, str):
        return LIBRARY
    if name in (WAIT_RANGE, WORKED_RANGE, PROCESS_WAIT_RANGE):
        return WAIT
    if parse_serving(name) is not None:
        return SERVING
    if name.startswith((COMPILED_FX, COMPILED_PREFIX, AOTI_PREFIX)):
        return COMPILED
    if PROFILER_STEP_NAME.match(name):
        return PROFILER_STEP
    if name.startswith(REPLAY_PREFIX):
        return REPLAY
    if name.startswith(LOOP_PREFIXES):
        return LOOP
    if name in (BACKWARD_RANGE, GRAD_RANGE):
        return BACKWARD
    if name in WRAPPER_RANGES:
        return WRAPPER
    if is_library(name):
        return LIBRARY
    if _WARMUP.search(name):
        return WARMUP
    return RANGE


def trains(names: Iterable[str]) -> bool:
    """Whether any of ``names`` is a backward call's or an optimizer step's range: the loop
    they came from trained (the light pass's module timing, an inference loop's generator)."""
    return any(kind(n) == BACKWARD or n.startswith(OPTIMIZER_STEP_PREFIX) for n in names)


def loop_rank(name: str) -> int:
    """Position of a loop marker in :data:`LOOP_PREFIXES` (the data loader first)."""
    return next(i for i, p in enumerate(LOOP_PREFIXES) if name.startswith(p))


# one optimizer's steps among those of its class (``Optimizer.step#Adam#2.step``): torch names
# each step's range after the optimizer's class only, so a GAN's two Adams share one name.
# Ordinal NEW_OPTIMIZER (``Optimizer.step#SGD#new.step``): the first step of each optimizer of
# the class, where the program makes a new one per outer iteration (Reptile, MAML, test-time
# adaptation: a copy of the model and an SGD per task, a few steps, then the meta-update).
_OPTIMIZER_INSTANCE = re.compile(r"^Optimizer\.step#(.+)#(\d+|new)\.step$")
NEW_OPTIMIZER = 0


def optimizer_instance(name: str, ordinal: int) -> str:
    """The step name of the ``ordinal``-th optimizer (by first step) among those whose steps
    torch names ``name`` (``Optimizer.step#Adam.step``, 2: ``Optimizer.step#Adam#2.step``;
    :data:`NEW_OPTIMIZER`: ``Optimizer.step#Adam#new.step``)."""
    return f"{name.removesuffix('.step')}#{ordinal or 'new'}.step"


def optimizer_class(name: str) -> str:
    """The optimizer of an optimizer range: ``Optimizer.zero_grad#Adam.zero_grad`` and
    ``Optimizer.step#Adam.step``: ``Adam`` (an :func:`optimizer_instance`'s: ``Adam#2``)."""
    return name.split("#", 1)[1].split(".", 1)[0]


def parse_optimizer_instance(name: str) -> tuple[str, int] | None:
    """(torch's range name, the ordinal) of an :func:`optimizer_instance` name, else None."""
    m = _OPTIMIZER_INSTANCE.match(name)
    if m is None:
        return None
    return f"{OPTIMIZER_STEP_PREFIX}{m.group(1)}.step", NEW_OPTIMIZER if m.group(2) == "new" else int(m.group(2))


def compiled_name(qualname: str) -> str:
    """The light pass's step name for the calls of a torch.compile-d function."""
    return f"{COMPILED_PREFIX}{qualname}"


def aoti_name(ordinal: int) -> str:
    """The light pass's step name for the calls of the ``ordinal``-th AOTInductor model
    called (1 for the first)."""
    return f"{AOTI_PREFIX}{ordinal}"


def replay_name(ordinal: int) -> str:
    """The light pass's range name for the replays of the ``ordinal``-th CUDA graph replayed
    (1 for the first)."""
    return f"{REPLAY_PREFIX}{ordinal}"
