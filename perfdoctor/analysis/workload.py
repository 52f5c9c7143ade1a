"""Workload kind: is this trace training or inference, and what says so.

Rules written for inference (decode latency, KV cache, request batching, a 10 ms p99) must
not fire on a training trace, and training advice (overlap gradient all-reduce) must not
fire on a decode loop. This module decides, and keeps the evidence so the report can say
"training: 232 backward ops, Optimizer.step#AdamW.step".

Evidence of training, strongest first:

``backward_ops``     autograd ops: ``autograd::engine::evaluate_function: AddmmBackward0``
                     and the ``*Backward0`` nodes themselves (Kineto ``cpu_op`` events)
``optimizer``        an optimizer step range ``Optimizer.step#AdamW.step`` (PyTorch records
                     it as a ``user_annotation``; ``zero_grad`` alone is not a step)
``autograd_thread``  a host thread named ``pt_autograd_N`` (Kineto thread metadata)
``backward_kernels`` kernels whose names are gradients (``GeluBackwardCUDAKernelImpl``,
                     ``layer_norm_grad_input_kernel``, ``softmax_warp_backward``) — the only
                     evidence left when the trace keeps no CPU ops (nsys)

None of them → inference.

No trace read (no GPU kernels and no CPU ops: the torch pass died, its file is damaged, the
run collected none), the light pass can still say so, confidence ``low`` (nothing in a trace
confirms it): it timed an optimizer step or a backward call → training; it saw the model's
calls, every one without grad, and neither → inference (an evaluation loop over a DataLoader,
whose fetch is the step); else a step ``perfdoctor run`` chose as torch's training-loop range
(``enumerate(DataLoader)#…__next__``, ``Optimizer.zero_grad#…``, ``Optimizer.step#…``) is a
training loop's iteration → training. Otherwise the kind is ``unknown``.

Then the task (``Workload.task``), which decides the thresholds and fix texts that fit
(a channels-last fix for a ResNet, a CUDA graph for a decode loop), from the same names:

``training``     the kind above
``serving``      vLLM / SGLang step ranges (``execute_context_*``, ``step[DECODE bs=32]``)
``diffusion``    diffusers / DiT names (``unet``, ``transformer_blocks``, ``scheduler.step``, Flux, SD3, xDiT)
``llm-prefill``  a language model (RMSNorm / rotary / KV-cache / lm_head names) whose steps say prefill
``llm-decode``   a language model otherwise (one token per step: the seed pack's workload);
                 a token embedding counts only where no encoder (``BertEmbeddings``) and no
                 convolution (TimeSformer's patch ``TimesformerEmbeddings``) is named
``vision``       convolution ops or kernels (or NCHW<->NHWC transforms) and no language-model name
``inference``    none of these: the generic inference rules apply Confidence says how much was visible: ``high`` when the CPU ops
were seen (a training step cannot hide its backward ops), ``medium`` when only ranges and
kernel names were (a trace without CPU ops, e.g. nsys without NVTX from PyTorch), ``none``
for a trace with no GPU kernels and no ops (kind ``unknown``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perfdoctor.names import ranges as rangenames
from perfdoctor.names.codes import equals, factorize
from perfdoctor.profile import Profile

KINDS = ("training", "inference", "unknown")
TASKS = ("training", "serving", "diffusion", "llm-prefill", "llm-decode", "vision", "inference", "unknown")
# vLLM's and SGLang's own source files in the Python frames are serving engines too
_ENGINE_FRAME = re.compile(r"(?:^|/)(?:vllm|sglang)/\w")
_SERVING = re.compile(r"^execute_context_|^step\[(?:DECODE|PREFILL|EXTEND|MIXED)|execute_model|ModelRunner", re.I)
_DIFFUSION = re.compile(r"diffusers|unet|transformer_blocks|scheduler\.step|denois|flux|sd3|xdit|\bdit\b|CUDAGraphNode", re.I)
# A decoder names its norms, rotary positions, KV cache, head or generation loop. A token
# embedding is weaker evidence: an encoder has one too (BERT: BertEmbeddings, aten::embedding)
# and a video or image transformer names its patch convolution so (TimesformerEmbeddings). It
# makes a language model only where no encoder and no convolution is named (an unannotated
# HF generate keeps no more than aten::embedding among its ops).
# ...ForConditionalGeneration, ...Seq2SeqLM: transformers' encoder-decoder generators (Whisper,
# T5, BART), whose decoder layers sit below the depths the light pass notes: Whisper's audio
# front end (Conv1d) read as vision, and its decode loop got an image model's advice
_LLM = re.compile(r"rms_?norm|rotary|\brope\b|kv_?cache|reshape_and_cache|paged_attention|decode|generate|lm_head|llama|causallm"
                  r"|ForConditionalGeneration|Seq2SeqLM|SpeechSeq2Seq", re.I)
_LLM_WEAK = re.compile(r"embedding", re.I)
_ENCODER = re.compile(r"encoder|bert", re.I)
_PREFILL = re.compile(r"prefill|context_encoding|extend", re.I)
# "fprop" is cuDNN's convolution forward, but not in its fused attention (sdpa_..._flash_fprop);
# aten::convolution and mkldnn's are what a compiled CNN keeps on the CPU (inductor calls them
# directly: no conv2d op, the pooling fused away)
_VISION = re.compile(r"conv(?:olution)?\d?d|aten::_?convolution\b|mkldnn_convolution|cudnn_convolution|nchwToNhwc|nhwcToNchw|implicit_?gemm|(?<!flash_)fprop|max_pool|adaptive_avg_pool", re.I)

_BACKWARD_OP = re.compile(rf"^{re.escape(rangenames.BACKWARD_OP_PREFIX)}|Backward\d*$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
_AUTOGRAD_THREAD = re.compile(r"pt_autograd", re.I)
_BACKWARD_KERNEL = re.compile(r"backward|_grad_input|grad_weight|GammaBetaBackward|_bwd_|bwd_kernel|dgrad|wgrad", re.I)


@dataclass
class Workload:
    kind: str
    confidence: str
    backward_ops: int = 0
    optimizer_steps: list[str] = field(default_factory=list)
    autograd_threads: list[str] = field(default_factory=list)
    backward_kernels: int = 0
    ops_seen: int = 0
    evidence: list[str] = field(default_factory=list)
    task: str = "unknown"  # TASKS: what the program is for (module docstring)
    task_evidence: str = ""

    @property
    def text(self) -> str:
        """One line for the report: ``training: 232 backward ops, Optimizer.step#AdamW.step``."""
        return f"{self.kind}: {', '.join(self.evidence)}" if self.evidence else self.kind

    @property
    def task_text(self) -> str:
        return f"{self.task} ({self.task_evidence})" if self.task_evidence else self.task

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "confidence": self.confidence,
            "backward_ops": self.backward_ops,
            "optimizer_steps": self.optimizer_steps,
            "autograd_threads": self.autograd_threads,
            "backward_kernels": self.backward_kernels,
            "ops_seen": self.ops_seen,
            "evidence": self.text,
            "task": self.task,
            "task_evidence": self.task_evidence,
        }


def _counts(names: Mapping[str, int] | pd.Series | None) -> dict[str, int]:
    if names is None:
        return {}
    if isinstance(names, pd.Series):
        return {str(k): int(v) for k, v in names.value_counts().items()}
    return {str(k): int(v) for k, v in names.items()}


def classify(
    profile: Profile,
    op_counts: Mapping[str, int] | None = None,
    thread_names: Mapping[int, str] | Sequence[str] | None = None,
) -> Workload:
    """Training or inference, with evidence.

    ``op_counts``: CPU op name → count (Kineto ``cpu_op`` events); defaults to
    ``profile.origin.op_counts`` when the loader kept it. ``thread_names``: host thread
    names; defaults to ``profile.origin.thread_names``. Ranges and kernel names always come
    from the profile.
    """
    if op_counts is None:
        op_counts = profile.origin.op_counts
    if thread_names is None:
        thread_names = profile.origin.thread_names
    ops = _counts(op_counts)
    ranges = _counts(profile.ranges["name"]) if not profile.ranges.empty else {}
    names = {**ranges}
    for k, v in ops.items():
        names[k] = names.get(k, 0) + v

    evaluate = sum(v for k, v in names.items() if k.startswith(rangenames.BACKWARD_OP_PREFIX))
    backward = evaluate or sum(v for k, v in names.items() if _BACKWARD_OP.search(k))
    optimizer = sorted(k for k in names if _OPTIMIZER_STEP.match(k))
    tnames = list(thread_names.values()) if isinstance(thread_names, Mapping) else list(thread_names or [])
    autograd = sorted({t for t in tnames if isinstance(t, str) and _AUTOGRAD_THREAD.search(t)})
    codes, uniques = factorize(profile.activities["name"])  # every name test once per distinct name
    kernels_of = np.bincount(codes[equals(profile.activities["kind"], "kernel")], minlength=len(uniques))  # per distinct name
    n_kernels = int(kernels_of.sum())
    bw_kernels = int(sum(int(n) for k, n in zip(uniques, kernels_of) if n and isinstance(k, str) and _BACKWARD_KERNEL.search(k)))

    evidence: list[str] = []
    if backward:
        evidence.append(f"{backward} backward ops")
    if optimizer:
        evidence.append(", ".join(optimizer))
    if autograd:
        evidence.append(f"autograd thread {', '.join(t.removeprefix('thread ') for t in autograd)}")  # Kineto: "thread 852 (pt_autograd_0)"
    if bw_kernels:
        evidence.append(f"{bw_kernels} backward kernels")

    ops_seen = sum(ops.values())
    if backward or optimizer or autograd:
        kind, confidence = "training", "high"
    elif bw_kernels:
        kind, confidence = "training", "medium"
    elif not n_kernels and not ops_seen and (light_training := _light_training(profile)) is not None:
        kind, confidence = ("training" if light_training else "inference"), "low"
        evidence.append(("the light pass timed an optimizer step or a backward call" if light_training else
                         "the light pass saw the model's calls, every one without grad, and no optimizer step or backward call")
                        + " (no GPU kernels and no CPU ops in the trace to confirm it)")
    elif not n_kernels and not ops_seen and (loop := _light_loop_step(profile)) is not None:
        kind, confidence = "training", "low"
        evidence.append(f"the light pass's step is torch's training-loop range {loop[:80]!r} (no GPU kernels and no CPU ops in the trace to confirm it)")
    elif not n_kernels and not ops_seen:
        kind, confidence = "unknown", "none"
        evidence.append("no GPU kernels and no CPU ops in the trace")
    else:
        kind = "inference"
        confidence = "high" if ops_seen else "medium"
        seen = f"among {ops_seen} CPU ops" if ops_seen else f"(no CPU ops in the trace; {n_kernels} kernels checked)"
        evidence.append(f"no backward op, no optimizer step {seen}")
    # the module classes the light pass saw (a run bundle's): a step that is no module call
    # (a DataLoader fetch) leaves the model's name out of the trace, and aten::embedding alone
    # read a BERT classifier's Trainer.predict as LLM decode
    classes = profile.origin.bundle.module_classes if profile.origin.bundle is not None else ()
    task, task_why = _task(kind, {**names, **{c: 1 for c in classes if c not in names}}, uniques, kernels_of)
    return Workload(
        task=task,
        task_evidence=task_why,
        kind=kind,
        confidence=confidence,
        backward_ops=int(backward),
        optimizer_steps=optimizer,
        autograd_threads=autograd,
        backward_kernels=bw_kernels,
        ops_seen=ops_seen,
        evidence=evidence,
    )


def _light_training(profile: Profile) -> bool | None:
    """Whether the light pass saw the program train (:attr:`perfdoctor.profile.BundleFacts.light_training`)."""
    facts = profile.origin.bundle
    return facts.light_training if facts is not None else None


def _light_loop_step(profile: Profile) -> str | None:
    """The light pass's step name when it is torch's training-loop range (the data loader's
    ``__next__``, ``Optimizer.zero_grad`` or ``Optimizer.step``: :data:`perfdoctor.names.ranges.LOOP_PREFIXES`)."""
    from perfdoctor.names.ranges import LOOP_PREFIXES

    light = getattr(profile, "light", None)
    name = getattr(light, "name", None)
    return name if isinstance(name, str) and name.startswith(LOOP_PREFIXES) else None


def _first(pattern: re.Pattern[str], names) -> str | None:
    """The first name that matches; Python frames (``file.py(12): fn``) are left out: a
    library's ``decode`` or ``property`` says nothing about the model."""
    return next((k for k in names if isinstance(k, str) and ".py(" not in k and not k.startswith("<built-in") and pattern.search(k)), None)


def _task(kind: str, names: dict[str, int], kernel_names, kernels_of: np.ndarray) -> tuple[str, str]:
    """The task (module docstring) and the name that says so."""
    if kind in ("training", "unknown"):
        return kind, ""
    ran = [k for k, n in zip(kernel_names, kernels_of) if n]
    if (hit := _first(_SERVING, names)) is not None:
        return "serving", hit[:60]
    if (hit := next((k for k in names if isinstance(k, str) and _ENGINE_FRAME.search(k)), None)) is not None:
        return "serving", hit[:60]
    if (hit := _first(_DIFFUSION, names)) is not None:
        return "diffusion", hit[:60]
    llm, vision = _first(_LLM, names), None
    if llm is None:
        vision = _first(_VISION, names) or _first(_VISION, ran)  # once: the weak LLM test and the vision answer read it
        if vision is None and _first(_ENCODER, names) is None:
            llm = _first(_LLM_WEAK, names)
    if llm is not None:
        if (hit := _first(_PREFILL, names)) is not None:
            return "llm-prefill", hit[:60]
        return "llm-decode", llm[:60]
    if vision is not None:
        return "vision", vision[:60]
    return "inference", ""


def applies(rule_workload: str | None, workload: Workload) -> bool:
    """Whether a rule declared for ``rule_workload`` ("inference" / "training" / "any" or
    None) applies to this trace. On an ``unknown`` workload only the rules for any workload
    apply: a rule declared for one (a 10 ms p99 for decode and serving) is judged where that
    workload is known, not on a trace that cannot say (the engine reports it not evaluated,
    with the reason, never passed; ``--workload`` sets the workload)."""
    if not rule_workload or rule_workload == "any":
        return True
    if workload.kind == "unknown":
        return False
    if rule_workload in TASKS and rule_workload not in ("training", "inference"):
        # a task-specific rule also runs on unrecognised inference (abstaining would hide it)
        return workload.kind == "inference" and workload.task in (rule_workload, "inference")
    return rule_workload == workload.kind
