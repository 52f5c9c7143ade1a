"""A CUDA C++ kernel without a C++ extension: nvcc -> cubin (cached), the driver API via ctypes.

torch's extension loader compiles a whole PyTorch binding (about a minute); a kernel that
takes one parameter struct needs none of it. `build_cubin` runs `nvcc -cubin` on one
source file (a few seconds, once: the cubin is cached under a hash of the source, the
defines, the target and the compiler's version), and `CudaKernel` loads it into the
context PyTorch uses and launches it on PyTorch's current stream, so the launch is
ordered with torch's work and is captured by `torch.cuda.graph` like any kernel.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from perfdoctor.engine.config import BadInput
from perfdoctor.errors import UsageError
from perfdoctor.io import cache_dir, write_bytes, write_text
from perfdoctor.text import clean

# CUfunction_attribute values (cuda.h).
_SHARED_SIZE_BYTES, _LOCAL_SIZE_BYTES, _NUM_REGS, _MAX_DYNAMIC_SHARED = 1, 3, 4, 8


def cubin_dir() -> Path:
    """Where built cubins are kept: $PERFDOCTOR_CACHE/cubin, else perfdoctor's cache folder
    (:func:`perfdoctor.io.cache_dir`)/cubin."""
    root = os.environ.get("PERFDOCTOR_CACHE")
    return (Path(root) if root else cache_dir()) / "cubin"


def find_nvcc() -> str:
    """nvcc on PATH, else under $CUDA_HOME (or /usr/local/cuda); BadInput when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(home) / "bin" / "nvcc"
    if candidate.is_file():
        return str(candidate)
    raise BadInput("building the CUDA kernel needs nvcc (the CUDA toolkit) on PATH or under $CUDA_HOME")


def build_cubin(source: Path, defines: dict[str, int], arch: str = "sm_90a") -> bytes:
    """The cubin of `source` for `arch` with `-D` defines, built once and cached."""
    nvcc = find_nvcc()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    key = hashlib.sha256("\0".join([source.read_text(), *flags, arch, version]).encode()).hexdigest()[:20]
    path = cubin_dir() / f"{source.stem}-{key}.cubin"
    cached = _cached_cubin(path)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory() as scratch:
        data = _nvcc(nvcc, source, flags, arch, Path(scratch) / path.name)
    try:  # the digest last: a cubin without a matching one is not trusted (a crash between the two rebuilds it)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, data, follow_links=False)
        write_text(_digest_path(path), hashlib.sha256(data).hexdigest(), follow_links=False)
    except (OSError, UsageError) as exc:  # an unwritable cache: built, "not cached"
        print(f"warning: cubin not cached ({clean(exc)})", file=sys.stderr)
    return data


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _cached_cubin(path: Path) -> bytes | None:
    """The cached cubin when it is a regular file whose SHA-256 matches the digest written
    beside it; else None, and it is rebuilt: a damaged cubin is never handed to the driver."""
    try:
        if not (stat.S_ISREG(os.lstat(path).st_mode) and stat.S_ISREG(os.lstat(_digest_path(path)).st_mode)):
            return None
        data = path.read_bytes()
        digest = _digest_path(path).read_text(errors="replace").strip()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == digest else None


def _nvcc(nvcc: str, source: Path, flags: list[str], arch: str, out: Path) -> bytes:
    """``source`` built by nvcc into ``out``; its bytes."""
    # -gencode, not -arch=sm_90a: the shorthand also runs a plain sm_90 pass on some nvcc
    # versions, which rejects the sm_90a-only instructions.
    cmd = [nvcc, f"-gencode=arch=compute_{arch[3:]},code={arch}", "-cubin", "-O3", *flags, "-o", str(out), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise BadInput(f"nvcc could not build {source.name}: {tail}")
    return out.read_bytes()


def _driver() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise BadInput(f"the CUDA driver library (libcuda.so.1) could not be loaded: {e}") from None


class CudaKernel:
    """One `extern "C"` kernel of a cubin, launched with a single by-value struct parameter.

    Loads into PyTorch's (primary) context of the current device. `registers`,
    `local_bytes` (stack / spills), `static_shared` are the compiled function's resources;
    `blocks_per_sm(threads, dynamic_shared)` is the driver's occupancy for a launch shape.
    """

    def __init__(self, cubin: bytes, name: str, dynamic_shared: int) -> None:
        self.cuda = _driver()
        torch.cuda.init()
        torch.cuda.current_stream()  # makes torch's context current on this thread
        ctx = ctypes.c_void_p()
        self._check(self.cuda.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:  # no runtime call has bound one yet: bind the primary context
            dev = ctypes.c_int()
            self._check(self.cuda.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
            self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            self._check(self.cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._image = ctypes.create_string_buffer(cubin, len(cubin))
        self.module = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), self._image), "cuModuleLoadData")
        self.func = ctypes.c_void_p()
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(self.func), self.module, name.encode()),
                    "cuModuleGetFunction")
        self._check(self.cuda.cuFuncSetAttribute(self.func, _MAX_DYNAMIC_SHARED, dynamic_shared),
                    "cuFuncSetAttribute(max dynamic shared memory)")
        self.registers = self._attribute(_NUM_REGS)
        self.local_bytes = self._attribute(_LOCAL_SIZE_BYTES)
        self.static_shared = self._attribute(_SHARED_SIZE_BYTES)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            msg = ctypes.c_char_p()
            self.cuda.cuGetErrorString(result, ctypes.byref(msg))
            raise RuntimeError(f"{what} failed: CUDA error {result} ({(msg.value or b'?').decode()})")

    def _attribute(self, which: int) -> int:
        value = ctypes.c_int()
        self._check(self.cuda.cuFuncGetAttribute(ctypes.byref(value), which, self.func), "cuFuncGetAttribute")
        return value.value

    def blocks_per_sm(self, threads: int, dynamic_shared: int) -> int:
        n = ctypes.c_int()
        self._check(self.cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(n), self.func, threads, ctypes.c_size_t(dynamic_shared)), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def launch(self, grid: int, threads: int, dynamic_shared: int, params: ctypes.Structure) -> None:
        """Launch on PyTorch's current stream; the driver copies `params` at the call (and a
        graph capture copies it into the node), so the struct may change afterwards."""
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(params), ctypes.c_void_p))
        self._check(self.cuda.cuLaunchKernel(
            self.func, grid, 1, 1, threads, 1, 1, dynamic_shared, stream, args, None), "cuLaunchKernel")
