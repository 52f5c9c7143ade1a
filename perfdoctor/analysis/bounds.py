"""What bounds each kernel class: achieved bytes/s and FLOP/s against the device's ceilings.

For every kernel class of the attribution (:data:`perfdoctor.analysis.attribution.BUSY_PARTS`)
over the traced steps: its kernel time, the bytes it moved and the FLOPs it did, the rates
those give over its kernel time, its arithmetic intensity (FLOP per byte) against the ridge
point (peak FLOP/s / peak bytes/s), and what bounds it:

* **memory-bound**: intensity below the ridge; judged by bandwidth (achieved / ceiling: the
  seed's 85 % DRAM rule applies to these classes, ``memory_bound_bw_util``);
* **compute-bound**: intensity at or above the ridge; judged by FLOP/s against the matmul rate;
* **latency-bound**: the work of its typical (median) kernel would take less than
  :data:`LATENCY_NS` at the ceilings (its bytes at the bandwidth, its FLOPs at the matmul
  rate) and it reaches less than half of what its intensity allows (the roofline
  ``min(peak FLOP/s, intensity × peak bytes/s)``): too little work per launch to reach
  either ceiling (ramp-up, tail, too few blocks), however long the kernel runs;
* no verdict, with the reason: communication (the interconnect, not DRAM or FLOPs), a
  class whose costed kernels cover under :data:`MIN_COVERAGE` of its time, no ceilings.

Where the counts come from, per kernel:

* **bytes**: Nsight Compute's DRAM bytes (read + write) where ncu ran (its own kernel times;
  ncu replays a separate run, so it is matched by class, not by kernel); memcpy / memset
  activities from their ``bytes`` (device-to-device copies read and write them: ×2; host
  copies cross PCIe, not DRAM, and are left out); else from the shapes of the launching CPU
  op (:func:`op_cost`: the tensors read and written, dtype sizes from "Input type");
* **FLOPs**: from the launching op's shapes only (GEMM, convolution, attention:
  :func:`gemm_flops`, :func:`conv_flops`, :func:`attention_flops`); other classes do O(1)
  FLOP per element, far below any ridge, and are not counted.

The launching op of a kernel is the innermost CPU op with recorded shapes
(``Profile.ops``) around its launch call on the launching thread (kernel → correlation →
call). An op that launches several kernels shares its counts among them by duration.

Ceilings: ``perfdoctor calibrate``'s measured DRAM read bandwidth and bf16 matmul rate (a
bundle carries them), else the card's datasheet peak (:data:`DATASHEET`, labelled as such;
bandwidth: NVML's theoretical peak before the datasheet), else unavailable, with why.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.analysis.attribution import BUSY_PARTS, LABELS, activity_part_codes, kernel_part, part_is
from perfdoctor.analysis.ownership import containing
from perfdoctor.names.codes import factorize, one_object
from perfdoctor.names.families import family
from perfdoctor.schema import repeated
from perfdoctor.text import percent, value

LATENCY_NS = 10_000  # a kernel with less work than this at the ceilings spends much of its time in ramp-up and tail
MIN_COVERAGE = 0.5  # costed kernels must cover this share of a class's time for a verdict
LATENCY_REACH = 0.5  # ... and reach less than this share of their roofline to be latency-bound
# Classes whose FLOPs are counted from shapes; the others do O(1) FLOP per element.
FLOP_CLASSES = ("gemm", "convolution", "attention")
# Classes whose bytes may come from an op without a formula (the tensors it reads and writes).
# GEMM, convolution and attention need their formula: the generic count of an attention op
# over a paged KV cache would be the whole cache. Communication is not costed.
GENERIC_CLASSES = ("normalisation", "elementwise", "layout_transform", "reduction_sampling", "memcpy_memset", "other")
NO_SHAPES = "the trace has no CPU ops with recorded shapes (torch.profiler record_shapes=True)"
MIN_MEMORY_SHARE = 0.1  # memory-bound classes under this share of the judged kernel time do not make a DRAM finding
IMPLAUSIBLE = 1.5  # bytes from shapes faster than this × the bandwidth ceiling: the op read only part of its tensors

# Bytes per element of the dtypes torch.profiler writes in "Input type".
DTYPE_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
}
DTYPE_LABEL = {"double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
               "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8"}

# Datasheet peaks: (name pattern, label, HBM TB/s, dense bf16 tensor TFLOP/s — fp16 on V100,
# which has no bf16), from the vendors' product datasheets. First match wins.
DATASHEET: tuple[tuple[str, str, float, float], ...] = (
    (r"H200", "NVIDIA H200 SXM", 4.8, 989.0),
    (r"H100.*PCIe", "NVIDIA H100 PCIe", 2.0, 756.0),
    (r"H100.*NVL", "NVIDIA H100 NVL", 3.9, 835.0),
    (r"H100", "NVIDIA H100 SXM", 3.35, 989.0),
    (r"B200", "NVIDIA B200", 8.0, 2250.0),
    (r"A100.*(?:PCIE|PCIe).*40|A100.*40.*(?:PCIE|PCIe)", "NVIDIA A100 40GB PCIe", 1.555, 312.0),
    (r"A100.*80", "NVIDIA A100 80GB SXM", 2.039, 312.0),
    (r"A100", "NVIDIA A100 40GB SXM", 1.555, 312.0),
    (r"V100", "NVIDIA V100 SXM2 (fp16 tensor)", 0.9, 125.0),
    (r"L40S", "NVIDIA L40S", 0.864, 362.0),
    (r"\bL4\b", "NVIDIA L4", 0.3, 121.0),
    (r"MI300X", "AMD Instinct MI300X", 5.3, 1307.4),
    (r"MI250X", "AMD Instinct MI250X", 3.2768, 383.0),
    (r"MI250", "AMD Instinct MI250", 3.2768, 362.1),
)


# ---------------------------------------------------------------- formulas (pure numbers)

def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """``batch`` products of an m×k by a k×n matrix: one multiply and one add per term."""
    return 2 * batch * m * n * k


def conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution along one axis (PyTorch's Conv docs)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_flops(batch: int, out_spatial: list[int], weight: list[int]) -> int:
    """A convolution (grouped or not): every output pixel of every image is a dot product
    of one output channel's filter, (Cin / groups) × Πk terms; summed over the Cout
    channels that is the whole weight tensor, so FLOPs = 2 · N · Π out · |W| (groups enter
    through the weight's shape [Cout, Cin/groups, k...])."""
    return 2 * batch * math.prod(out_spatial) * math.prod(weight)


def causal_pairs(lq: int, lk: int) -> int:
    """Query-key pairs a causal mask keeps, aligned top-left as torch's SDPA ``is_causal``
    (``ones(L, S).tril()``): query i sees keys 0..i."""
    full = min(lq, lk)
    return full * (full + 1) // 2 + max(lq - lk, 0) * lk


def attention_flops(batch: int, heads: int, lq: int, lk: int, d: int, dv: int, causal: bool = False) -> int:
    """Q·Kᵀ (2·d per pair) and P·V (2·dv per pair) over the pairs attended: Lq·Lk, or the
    causal mask's (:func:`causal_pairs`; kernels skip masked blocks, the count is the work
    that must be done). Softmax's O(1) per pair is left out."""
    pairs = causal_pairs(lq, lk) if causal else lq * lk
    return 2 * batch * heads * pairs * (d + dv)


# ---------------------------------------------------------------- one op from its shapes

@dataclass(frozen=True)
class Cost:
    flops: float | None  # None: not counted for this op
    bytes: float | None  # None: unknown (a dtype not recorded, an index op)
    dtype: str = ""


def _numel(shape: list[int]) -> int:
    return math.prod(shape)


def _tensor(dims: list, types: list, i: int) -> tuple[list[int], int] | None:
    """Argument ``i`` as (shape, bytes per element), None when it is no tensor of a known dtype."""
    if i >= len(dims) or i >= len(types):
        return None
    shape, t = dims[i], types[i]
    if not isinstance(shape, list) or not all(isinstance(x, int) for x in shape) or t not in DTYPE_BYTES:
        return None
    if not shape and t in ("Scalar", ""):
        return None
    return shape, DTYPE_BYTES[t]


def _ints(text: str) -> list[int] | None:
    """A ScalarList as written in "Concrete Inputs" ("[2, 2]"), or a lone int ("1")."""
    try:
        v = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    return None


def _flag(concrete: list, i: int) -> bool | None:
    if i >= len(concrete) or not isinstance(concrete[i], str):
        return None
    return {"True": True, "False": False, "1": True, "0": False}.get(concrete[i])


def _bytes(*parts: tuple[list[int], int] | None, out: int = 0) -> float | None:
    if any(p is None for p in parts):
        return None
    return float(sum(_numel(s) * b for s, b in parts) + out)  # type: ignore[misc]


def _gemm(name: str, dims: list, types: list) -> Cost | None:
    # (index of A, index of B, index of the bias or None) per op, and whether B is [N, K] (linear)
    layout = {
        "aten::mm": (0, 1, None, False), "aten::bmm": (0, 1, None, False), "aten::matmul": (0, 1, None, False),
        "aten::addmm": (1, 2, 0, False), "aten::baddbmm": (1, 2, 0, False), "aten::linear": (0, 1, 2, True),
        "aten::_scaled_mm": (0, 1, None, False), "aten::mv": (0, 1, None, False), "aten::addmv": (1, 2, 0, False),
    }.get(name)
    if layout is None:
        return None
    ia, ib, ibias, linear = layout
    a, b = _tensor(dims, types, ia), _tensor(dims, types, ib)
    if a is None or b is None or not a[0] or not b[0]:
        return None
    sa, sb = a[0], b[0]
    k = sa[-1]
    if linear:  # x[..., K] · W[N, K]ᵀ
        m, n, batch = _numel(sa[:-1]), sb[0], 1
    else:
        m = sa[-2] if len(sa) >= 2 else 1
        n = sb[-1] if len(sb) >= 2 else 1
        batch = _numel(list(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))) if len(sa) > 2 or len(sb) > 2 else 1
    bias = _tensor(dims, types, ibias) if ibias is not None else None
    out = batch * m * n * a[1]
    read = _bytes(a, b, *([bias] if bias is not None else []), out=out)
    return Cost(float(gemm_flops(m, n, k, batch)), read, types[ia])


# Convolutions: the "Concrete Inputs" positions of (stride, padding, dilation, transposed, groups).
_CONV_ARGS = {
    "aten::convolution": (3, 4, 5, 6), "aten::_convolution": (3, 4, 5, 6), "aten::conv1d": (3, 4, 5, None),
    "aten::conv2d": (3, 4, 5, None), "aten::conv3d": (3, 4, 5, None), "aten::cudnn_convolution": (3, 2, 4, None),
    "aten::miopen_convolution": (4, 3, 5, None), "aten::mkldnn_convolution": (4, 3, 5, None),
}


def _conv(name: str, dims: list, types: list, concrete: list) -> Cost | None:
    where = _CONV_ARGS.get(name)
    if where is None:
        return None
    x, w = _tensor(dims, types, 0), _tensor(dims, types, 1)
    if x is None or w is None or len(x[0]) < 3 or len(w[0]) != len(x[0]):
        return None
    istride, ipad, idil, itrans = where
    get = (lambda i: _ints(concrete[i]) if i < len(concrete) and isinstance(concrete[i], str) else None)
    stride, dilation = get(istride), get(idil)
    pad_text = concrete[ipad] if ipad < len(concrete) else None
    spatial, kernel = x[0][2:], w[0][2:]
    if pad_text in ("same", "valid"):
        padding = None if pad_text == "same" else [0]
    else:
        padding = get(ipad)
    if stride is None or dilation is None or (padding is None and pad_text != "same"):
        return None  # stride / padding not recorded (no Concrete Inputs: torch.profiler before 2.1)
    axes = len(spatial)
    stride, dilation = stride * axes if len(stride) == 1 else stride, dilation * axes if len(dilation) == 1 else dilation
    transposed = _flag(concrete, itrans) if itrans is not None else False
    if pad_text == "same":
        out = list(spatial)
    else:
        padding = padding * axes if len(padding) == 1 else padding
        if transposed:
            return None  # output_padding changes the size; transposed convolutions are rare in inference
        out = [conv_out(s, k, st, p, d) for s, k, st, p, d in zip(spatial, kernel, stride, padding, dilation)]
    if any(o <= 0 for o in out):
        return None
    n = x[0][0]
    cout = w[0][0]
    bias = _tensor(dims, types, 2)
    written = n * cout * math.prod(out) * x[1]
    return Cost(float(conv_flops(n, out, w[0])), _bytes(x, w, *([bias] if bias else []), out=written), types[0])


# Attention ops: (layout of q/k/v, "Concrete Inputs" position of is_causal).
# BHSD: [batch, heads, seq, dim] (SDPA and its backends); BSHD: [batch, seq, heads, dim] (flash's own).
_ATTN_ARGS = {
    "aten::scaled_dot_product_attention": ("BHSD", 5), "aten::_scaled_dot_product_flash_attention": ("BHSD", 4),
    "aten::_scaled_dot_product_efficient_attention": ("BHSD", 6), "aten::_scaled_dot_product_cudnn_attention": ("BHSD", 6),
    "aten::_flash_attention_forward": ("BSHD", 8), "aten::_scaled_dot_product_flash_attention_for_cpu": ("BHSD", 4),
}


def _attention(name: str, dims: list, types: list, concrete: list) -> Cost | None:
    where = _ATTN_ARGS.get(name)
    if where is None:
        return None
    layout, icausal = where
    q, k, v = (_tensor(dims, types, i) for i in range(3))
    if q is None or k is None or v is None or not (len(q[0]) == len(k[0]) == len(v[0]) == 4):
        return None  # 3-D: variable-length batches (cu_seqlens), whose per-sequence lengths are not recorded
    if layout == "BSHD":
        (b, lq, h, d), (_, lk, _, _), (_, _, _, dv) = q[0], k[0], v[0]
    else:
        (b, h, lq, d), (_, _, lk, _), (_, _, _, dv) = q[0], k[0], v[0]
    causal = bool(_flag(concrete, icausal))  # not recorded: counted as unmasked (an upper bound)
    return Cost(float(attention_flops(b, h, lq, lk, d, dv, causal)), _bytes(q, k, v, out=b * h * lq * dv * q[1]), types[0])


# Reductions write far less than they read: their written bytes are left out.
_REDUCTIONS = re.compile(r"^aten::(sum|mean|amax|amin|max|min|argmax|argmin|norm|linalg_vector_norm|var|std|var_mean|all|any|prod|logsumexp)$")
# Ops that write without reading their destination.
_WRITE_ONLY = ("aten::copy_", "aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_")
# Index ops read only the rows they pick: the shapes do not tell how many bytes move.
_INDEXING = re.compile(r"^aten::(index|index_put_|gather|scatter|scatter_add_|index_add_|take|masked_select|nonzero|_index_put_impl_|cat|stack)$")


def _generic(name: str, dims: list, types: list) -> Cost | None:
    """Bytes of an op without a formula: the tensors it reads, plus what it writes — the
    first input again for an in-place op (``add_``), nothing more for one that only writes
    its destination (``copy_``: it reads the source), nothing for a reduction, else one
    tensor the size of its largest input (elementwise and normalisation outputs)."""
    if _INDEXING.match(name):
        return None
    if name == "aten::embedding":
        w, idx = _tensor(dims, types, 0), _tensor(dims, types, 1)
        if w is None or idx is None or len(w[0]) != 2:
            return None
        rows = _numel(idx[0]) * w[0][1] * w[1]
        return Cost(None, float(_numel(idx[0]) * idx[1] + 2 * rows), types[0])
    tensors = [t for t in (_tensor(dims, types, i) for i in range(len(dims))) if t is not None and t[0] is not None]
    if not tensors:
        return None
    sizes = [_numel(s) * b for s, b in tensors]
    if _REDUCTIONS.match(name):
        written = 0
    elif name in _WRITE_ONLY:
        written = 0
    elif name.endswith("_"):
        written = sizes[0]
    else:
        written = max(sizes)
    dtype = next((t for t in types if t in DTYPE_BYTES), "")
    return Cost(None, float(sum(sizes) + written), dtype)


def op_cost(name: str, dims: Any, types: Any, concrete: Any = ()) -> Cost | None:
    """FLOPs and bytes of one CPU op from its recorded arguments (parsed "Input Dims",
    "Input type", "Concrete Inputs"); None when its shapes do not say."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    concrete = concrete if isinstance(concrete, list) else []
    for fn in (lambda: _gemm(name, dims, types), lambda: _conv(name, dims, types, concrete),
               lambda: _attention(name, dims, types, concrete)):
        try:
            cost = fn()
        except (TypeError, ValueError, IndexError):  # a shape of a form no formula expects: not costed
            return None
        if cost is not None:
            return cost
    if name in _CONV_ARGS or name in _ATTN_ARGS:
        return None  # its FLOPs are the point; bytes alone would call it memory-bound
    try:
        return _generic(name, dims, types)
    except (TypeError, ValueError):
        return None


def parse_recorded(raw: Any) -> Any:
    """A recorded shape field of the ops table (``dims``, ``types``, ``concrete``: its JSON
    text), parsed; None where absent or not JSON."""
    if not isinstance(raw, (bytes, str)) or not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


# ---------------------------------------------------------------- kernels to their ops

def shaped_ops(ops: pd.DataFrame) -> np.ndarray:
    """Which rows of ``ops`` carry recorded shapes (a trace without ``record_shapes`` has none)."""
    return np.fromiter(map(len, ops["dims"].to_numpy(dtype=object)), dtype=np.int64, count=len(ops)) > 0


def any_shaped(ops: pd.DataFrame) -> bool:
    """Whether any row of ``ops`` carries recorded shapes (``shaped_ops(ops).any()``). A trace
    without them holds one empty object in every row (HF 80 MB: 164k ops): told by the
    rows' object addresses, not a length per row."""
    dims = ops["dims"].to_numpy(dtype=object)
    if not dims.size:
        return False
    if one_object(dims):
        return len(dims[0]) > 0
    return bool(shaped_ops(ops).any())


def launching_ops(profile, kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel (row of ``kernels``), the position in ``profile.ops`` of the innermost
    shaped CPU op around its launch call on the launching thread; -1 where there is none."""
    out = np.full(len(kernels), -1, dtype=np.int64)
    ops, calls = profile.ops, profile.calls
    if ops.empty or calls.empty or kernels.empty:
        return out
    c = calls[calls["correlation"] >= 0].drop_duplicates("correlation").set_index("correlation")
    corr = kernels["correlation"].to_numpy(np.int64)
    found = pd.Index(c.index).get_indexer(corr)
    has = (found >= 0) & (corr >= 0)
    if not has.any():
        return out
    t_launch = c["start_ns"].to_numpy(np.int64)[found[has]]
    tid_launch = c["tid"].to_numpy(np.int64)[found[has]]
    rows = np.flatnonzero(has)
    o_tid, o_start, o_end = (ops[k].to_numpy(np.int64) for k in ("tid", "start_ns", "end_ns"))
    shaped = shaped_ops(ops)  # the ops table holds every CPU op; only shaped ones are costed
    for tid in np.unique(tid_launch):
        mine = np.flatnonzero((o_tid == tid) & shaped)
        if not mine.size:
            continue
        order = mine[np.lexsort((-o_end[mine], o_start[mine]))]  # parents before children at one start
        sel = np.flatnonzero(tid_launch == tid)
        # The latest-starting op that contains the launch: the innermost, as ownership finds a
        # call's step among nested ranges.
        out[rows[sel]] = containing(o_start, o_end, order, t_launch[sel])
    return out


# ---------------------------------------------------------------- the ceilings

@dataclass
class Peaks:
    """The ceilings a class is judged against, each with where it comes from (or why not)."""

    bw_gbps: float | None
    bw_source: str
    tflops: float | None
    tflops_source: str

    @property
    def ridge(self) -> float | None:
        """FLOP per byte where the two ceilings meet."""
        if self.bw_gbps and self.tflops:
            return self.tflops * 1e12 / (self.bw_gbps * 1e9)
        return None


def datasheet(name: str | None) -> tuple[str, float, float] | None:
    if not isinstance(name, str):
        return None
    for pattern, label, tbps, tflops in DATASHEET:
        if re.search(pattern, name):
            return label, tbps, tflops
    return None


def peaks_of(device: dict[str, Any]) -> Peaks:
    """Calibrate's measurements, else NVML's theoretical bandwidth and the datasheet's peaks."""
    sheet = datasheet(device.get("name"))
    bw, bw_src = device.get("measured_dram_bw_gbps"), "calibrate (measured DRAM read)"
    if not bw and device.get("peak_dram_bw_gbps"):
        bw, bw_src = device["peak_dram_bw_gbps"], f"theoretical ({device.get('peak_source', 'nvml')}: memory clock × bus width)"
    if not bw and sheet:
        bw, bw_src = sheet[1] * 1000, f"datasheet: {sheet[0]}"
    fl, fl_src = device.get("measured_bf16_tflops"), "calibrate (measured bf16 matmul)"
    if not fl and sheet:
        fl, fl_src = sheet[2], f"datasheet: {sheet[0]} (dense bf16)"
    why = "unavailable: no perfdoctor calibrate measurement in the bundle and the device " + (
        f"{device.get('name')!r} is not in the datasheet table" if device.get("name") else "is not named in the trace")
    return Peaks(float(bw) if bw else None, bw_src if bw else why, float(fl) if fl else None, fl_src if fl else why)


# ---------------------------------------------------------------- per class

@dataclass
class ClassBound:
    part: str
    time_ms: float  # kernel time per step (sum of kernel durations, overlap not removed)
    kernels: float  # per step
    median_us: float
    work_us: float | None  # the median kernel's work at the ceilings (bytes / bandwidth, FLOPs / matmul rate)
    coverage: float  # share of time_ms whose bytes are known
    bytes_source: str  # "ncu", "shapes", "activity bytes", "" (none)
    bytes_per_step: float | None
    flops_per_step: float | None
    tbps: float | None
    tflops: float | None
    intensity: float | None
    bound: str | None  # "memory", "compute", "latency" or None (see reason)
    util: float | None  # achieved / the ceiling of its bound (latency: / its roofline, min(peak FLOP/s, intensity × bandwidth))
    dtype: str = ""
    reason: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Bounds:
    classes: list[ClassBound]
    peaks: Peaks | None
    steps: int
    reason: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        """Whether classes with a verdict hold at least half of the kernel time (communication
        aside): then the rules read the bounds, not the whole step."""
        total = sum(c.time_ms for c in self.classes if c.part != "communication")
        return total > 0 and sum(c.time_ms for c in self.classes if c.bound is not None) >= 0.5 * total

    def of(self, part: str) -> ClassBound | None:
        return next((c for c in self.classes if c.part == part), None)

    def memory_bound_bw_util(self) -> tuple[float | None, str]:
        """Bytes of the memory-bound classes / their kernel time / the bandwidth ceiling, and
        what it covers (or why there is none)."""
        if self.reason:
            return None, self.reason
        mem = [c for c in self.classes if c.bound == "memory" and c.tbps]
        if not mem:
            return None, "no kernel class was judged memory-bound"
        if not (self.peaks and self.peaks.bw_gbps):
            return None, self.peaks.bw_source if self.peaks else "no bandwidth ceiling"
        judged = sum(c.time_ms for c in self.classes if c.bound is not None)
        share = sum(c.time_ms for c in mem) / judged if judged else 0.0
        if share < MIN_MEMORY_SHARE:
            return None, (f"the memory-bound classes ({', '.join(LABELS[c.part] for c in mem)}) are {percent(share)} of the judged kernel "
                          f"time (under {percent(MIN_MEMORY_SHARE)}): DRAM bandwidth is not what bounds these kernels")
        time_s = sum(c.time_ms * c.coverage for c in mem) / 1e3
        moved = sum(c.tbps * 1e12 * c.time_ms * c.coverage / 1e3 for c in mem)
        what = ", ".join(f"{LABELS[c.part]} {value(c.tbps, 'TB/s')}" for c in mem)
        return float(moved / time_s / (self.peaks.bw_gbps * 1e9)), f"memory-bound classes ({what}) against {value(self.peaks.bw_gbps, 'GB/s')}, {self.peaks.bw_source}"

    def memory_bound_gap_ms(self, target: float) -> float | None:
        """Per step, the memory-bound classes' kernel time beyond what their bytes need at
        ``target`` × the bandwidth ceiling (each class's costed time; never below 0); None
        without memory-bound classes or a bandwidth ceiling."""
        mem = [c for c in self.classes if c.bound == "memory" and c.tbps]
        if not mem or not (self.peaks and self.peaks.bw_gbps) or not target:
            return None
        gap = 0.0
        for c in mem:
            ms = c.time_ms * c.coverage
            floor = ms * c.tbps * 1e3 / (self.peaks.bw_gbps * target)  # the same bytes at target × ceiling
            gap += max(ms - floor, 0.0)
        return gap

    def to_json(self) -> dict[str, Any]:
        if self.reason:
            return {"value": None, "reason": self.reason}
        p = self.peaks
        return {
            "steps": self.steps,
            "peaks": None if p is None else {"dram_gbps": p.bw_gbps, "dram_source": p.bw_source, "tflops": p.tflops,
                                             "tflops_source": p.tflops_source, "ridge_flop_per_byte": p.ridge},
            "latency_ns": LATENCY_NS,
            "classes": [c.to_json() for c in self.classes],
            "notes": self.notes,
        }


def _verdict(c: dict[str, Any], peaks: Peaks) -> tuple[str | None, float | None, str | None]:
    """(bound, utilisation, reason when no verdict) of one class's numbers (module docstring)."""
    if c["part"] == "communication":
        return None, None, "communication: bounded by the interconnect, not judged against DRAM or FLOP/s"
    if c["tbps"] is None:
        return None, None, c["why"] or "no bytes known for its kernels"
    if c["coverage"] < MIN_COVERAGE:
        return None, None, f"bytes known for only {percent(c['coverage'])} of its kernel time (under {percent(MIN_COVERAGE)})"
    if not peaks.bw_gbps:
        return None, None, peaks.bw_source
    bw = c["tbps"] * 1e3 / peaks.bw_gbps
    if bw > IMPLAUSIBLE and c["bytes_source"] != "ncu":
        return None, None, (f"its bytes from shapes give {value(c['tbps'], 'TB/s')}, above the {value(peaks.bw_gbps / 1e3, 'TB/s')} ceiling: "
                            "its ops read only part of their tensors (indices, caches, L2 reuse); not judged")
    if c["tflops"] is None or not peaks.tflops:
        if c["part"] in FLOP_CLASSES:
            return None, None, c["flop_why"] or peaks.tflops_source
        bound, util, reach = "memory", bw, bw  # O(1) FLOP per element: far below the ridge
    else:
        ridge = peaks.ridge or 0.0
        intensity = c["tflops"] * 1e12 / (c["tbps"] * 1e12) if c["tbps"] > 0 else math.inf
        fl = c["tflops"] / peaks.tflops
        bound, util = ("compute", fl) if intensity >= ridge else ("memory", bw)
        reach = c["tflops"] * 1e12 / min(peaks.tflops * 1e12, intensity * peaks.bw_gbps * 1e9)
    if c["work_us"] is not None and c["work_us"] * 1e3 < LATENCY_NS and reach < LATENCY_REACH:
        return "latency", reach, None  # its share of the roofline its intensity allows
    return bound, util, None


def _heaviest_dtype(dur: np.ndarray, codes: np.ndarray, dtypes: np.ndarray) -> str:
    """The dtype (not "") with the most time in ``dur``, its rows' dtypes ``dtypes[codes]``;
    a tie goes to the least dtype; "" for none: what ``pd.Series(dur).groupby(dtypes[codes]).sum()``
    without "" and its ``idxmax`` gave (a missing dtype, which groupby drops, is never it),
    at a bincount's cost instead of a groupby's per kernel class. ``dur`` holds whole
    nanoseconds, so its sums are exact in either order (below 2**53 ns)."""
    weights = np.bincount(codes, weights=dur, minlength=len(dtypes))
    present = np.bincount(codes, minlength=len(dtypes)) > 0  # groupby has only the dtypes of these rows
    best, most = "", 0.0
    for name, w, here in zip(dtypes.tolist(), weights.tolist(), present.tolist()):
        if not here or name is None or name != name or name == "" or not (w == w):  # None, NaN, "" (and a NaN weight, as idxmax skips it)
            continue
        if not best or w > most or (w == most and name < best):
            best, most = name, w
    return str(best)


def class_bounds(analysis) -> Bounds:
    """The bounds of every kernel class of ``analysis``'s steps (module docstring)."""
    t = analysis.timeline
    acts = t.activities
    steps = int(acts["step"].nunique()) if not acts.empty else 0
    if acts.empty or steps == 0:
        return Bounds([], None, 0, reason=analysis.steps.reason or "no step launched GPU work")
    profile = analysis.profile
    peaks = peaks_of(profile.device)
    parts, part_of = activity_part_codes(t)  # the part of activity i: parts[part_of[i]]
    dur = (acts["end_ns"] - acts["start_ns"]).to_numpy(np.float64)
    kinds = acts["kind"].to_numpy(dtype=object)
    is_kernel = kinds == "kernel"
    byts = np.full(len(acts), np.nan)
    flops = np.full(len(acts), np.nan)
    dtype = repeated("", len(acts))
    src = repeated("", len(acts))
    notes: list[str] = []
    # memcpy / memset activities: their own byte counts (device copies read and write them).
    copy_kind = acts["copy_kind"].to_numpy(dtype=object)
    ab = acts["bytes"].to_numpy(np.float64)
    dev_copy = (kinds == "memcpy") & (copy_kind == "DtoD")
    byts[dev_copy] = 2 * ab[dev_copy]
    byts[kinds == "memset"] = ab[kinds == "memset"]
    src[np.isfinite(byts)] = "activity bytes"
    host_copy = (kinds == "memcpy") & ~dev_copy
    # Kernels: the launching op's shapes, shared among its kernels by duration.
    # A kernel replayed from a CUDA graph was launched by the graph launch, not by the op
    # around it (its shapes are not the kernel's): not costed from shapes.
    kidx = np.flatnonzero(is_kernel & (acts["graph_id"].to_numpy(np.int64) < 0))
    if (is_kernel & (acts["graph_id"].to_numpy(np.int64) >= 0)).any():
        notes.append("kernels replayed from CUDA graphs have no launching op: not costed from shapes (ncu counts them)")
    has_shapes = any_shaped(profile.ops)
    if has_shapes and kidx.size:
        op_of = launching_ops(profile, acts.iloc[kidx])
        linked = op_of >= 0
        launchers = np.unique(op_of[linked])
        # Each step repeats its ops' arguments: parsed and costed once per distinct one (the
        # 80 MB eager bench trace: 36,520 launching ops, 0.6 s of CPU in class_bounds when
        # each op's JSON was parsed and costed on its own), the launchers matched to theirs
        # without a Python loop per launcher.
        args = list(zip(*(profile.ops[k].to_numpy(dtype=object)[launchers].tolist() for k in ("name", "dims", "types", "concrete"))))
        distinct = {a: i for i, a in enumerate(dict.fromkeys(args))}
        costs = [op_cost(name, parse_recorded(dims), parse_recorded(types), parse_recorded(concrete)) for name, dims, types, concrete in distinct]
        which = np.fromiter(map(distinct.__getitem__, args), dtype=np.intp, count=len(args))  # per launcher: its entry in costs
        rows, owner = kidx[linked], np.searchsorted(launchers, op_of[linked])  # owner: index in launchers
        # Each array per distinct cost, then per launcher (``[which]``).
        costed = np.array([c is not None for c in costs], dtype=bool)
        b_known = np.array([c is not None and c.bytes is not None for c in costs], dtype=bool)
        f_known = np.array([c is not None and c.flops is not None for c in costs], dtype=bool)
        c_bytes = np.array([c.bytes if k else np.nan for c, k in zip(costs, b_known)], dtype=np.float64)[which]
        c_flops = np.array([c.flops if k else np.nan for c, k in zip(costs, f_known)], dtype=np.float64)[which]
        c_dtype = np.array(["" if c is None else c.dtype for c in costs], dtype=object)[which]
        costed, b_known, f_known = costed[which], b_known[which], f_known[which]
        # An op with a formula (FLOPs) gives its counts to its kernels of a FLOP class only (a
        # transpose a convolution launches is not the convolution); any other op to all of its
        # kernels of the classes costed from generic bytes. Shared by duration among them.
        flop_op = f_known[owner]
        in_flop_class = np.isin(parts, FLOP_CLASSES)[part_of[rows]]
        takes = np.where(flop_op, in_flop_class, np.isin(parts, GENERIC_CLASSES)[part_of[rows]])
        rows, owner = rows[takes], owner[takes]
        share = pd.Series(dur[rows]).groupby(owner).transform("sum").to_numpy()
        w = np.zeros(len(rows))
        np.divide(dur[rows], share, out=w, where=share > 0)
        has_bytes, has_flops = b_known[owner], f_known[owner]
        byts[rows[has_bytes]] = c_bytes[owner[has_bytes]] * w[has_bytes]
        src[rows[has_bytes]] = "shapes"
        flops[rows[has_flops]] = c_flops[owner[has_flops]] * w[has_flops]
        is_costed = costed[owner]
        dtype[rows[is_costed]] = c_dtype[owner[is_costed]]
    ncu = _ncu_by_class(profile)
    out: list[ClassBound] = []
    dtype_of, dtypes = factorize(dtype)  # the dtypes numbered once: each class weighs them by code (_heaviest_dtype)
    for p in BUSY_PARTS:
        m = part_is(t, p) & ~host_copy
        if not m.any():
            continue
        time_ns = dur[m].sum()
        n = int(m.sum())
        known = m & np.isfinite(byts)
        flop_known = m & np.isfinite(flops)
        c: dict[str, Any] = {"part": p, "median_us": float(np.median(dur[m])) / 1e3, "why": None, "flop_why": None}
        c["work_us"] = None
        if p in ncu:
            nb, nt, typical = ncu[p]
            c.update(tbps=nb / nt * 1e9 / 1e12, coverage=1.0, bytes_source="ncu", bytes_per_step=None)
            if peaks.bw_gbps:
                c["work_us"] = typical / peaks.bw_gbps / 1e3
        elif known.any() and dur[known].sum() > 0:
            c.update(tbps=byts[known].sum() / (dur[known].sum() / 1e9) / 1e12, coverage=float(dur[known].sum() / time_ns) if time_ns else 0.0,
                     bytes_source="/".join(sorted(set(src[known]))), bytes_per_step=float(byts[known].sum()) / steps)
            if peaks.bw_gbps:
                work_ns = byts[known] / peaks.bw_gbps  # bytes / (GB/s) = ns
                if peaks.tflops:
                    work_ns = np.maximum(work_ns, np.nan_to_num(flops[known]) / peaks.tflops / 1e3)
                c["work_us"] = float(np.median(work_ns)) / 1e3
        else:
            c.update(tbps=None, coverage=0.0, bytes_source="", bytes_per_step=None,
                     why=NO_SHAPES if not has_shapes else "its launching ops' shapes do not give the bytes")
        if flop_known.any() and dur[flop_known].sum() > 0:
            c["tflops"] = flops[flop_known].sum() / (dur[flop_known].sum() / 1e9) / 1e12
            c["flops_per_step"] = float(flops[flop_known].sum()) / steps
        else:
            c["tflops"], c["flops_per_step"] = None, None
            c["flop_why"] = ("no FLOPs from shapes for its kernels (their launching ops are not GEMM, convolution or "
                             "attention ops with recorded shapes and strides)") if p in FLOP_CLASSES else None
        bound, util, reason = _verdict(c, peaks)
        dt = _heaviest_dtype(dur[m], dtype_of[m], dtypes)
        intensity = (c["tflops"] / c["tbps"]) if c["tflops"] is not None and c["tbps"] else None
        note = None
        if p in FLOP_CLASSES and dt in DTYPE_LABEL and DTYPE_LABEL[dt] in ("fp32", "fp64") and peaks.tflops:
            note = f"runs in {DTYPE_LABEL[dt]}: the bf16 matmul rate is not its ceiling (TF32 or bf16 autocast would use it)"
        out.append(ClassBound(
            part=p, time_ms=time_ns / 1e6 / steps, kernels=n / steps, median_us=c["median_us"], work_us=c["work_us"], coverage=c["coverage"],
            bytes_source=c["bytes_source"], bytes_per_step=c["bytes_per_step"], flops_per_step=c["flops_per_step"],
            tbps=c["tbps"], tflops=c["tflops"], intensity=intensity, bound=bound, util=util,
            dtype=DTYPE_LABEL.get(dt, dt), reason=reason, note=note,
        ))
    if host_copy.any():
        notes.append(f"host copies ({value(dur[host_copy].sum() / 1e6 / steps, 'ms')} per step) cross PCIe, not DRAM: left out of memcpy / memset")
    return Bounds(out, peaks, steps, notes=notes)


def _ncu_by_class(profile) -> dict[str, tuple[float, float, float]]:
    """Per class, ncu's DRAM bytes (read + write), kernel ns and median bytes per kernel, where ncu ran."""
    k = profile.counters
    if k.empty:
        return {}
    rw = k[k["metric"].isin(("dram__bytes_read.sum", "dram__bytes_write.sum"))]
    if rw.empty:
        return {}
    per = rw.groupby("correlation").agg(name=("name", "first"), bytes=("value", "sum"), ns=("duration_ns", "first"))
    per = per[per["ns"] > 0]
    per["part"] = [kernel_part(n, "kernel", family(n, "kernel")) for n in per["name"]]
    return {p: (float(g["bytes"].sum()), float(g["ns"].sum()), float(g["bytes"].median())) for p, g in per.groupby("part")}
