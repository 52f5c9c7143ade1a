"""Reading inputs and writing outputs safely (see ``docs/safety.md``).

Inputs
    :func:`regular_file` refuses anything that is not a regular file once symlinks are
    resolved (a FIFO would block forever, ``/dev/zero`` never ends). :func:`read_capped`
    and :func:`read_maybe_gzip` read at most :func:`max_input_bytes` bytes — after
    decompression for gzip, which is streamed, so a gzip bomb stops at the cap instead of
    exhausting memory. The cap is ``PERFDOCTOR_MAX_TRACE_BYTES`` (default 2 GiB).
    :func:`read_maybe_gzip` maps an uncompressed file into memory instead of copying it.

Outputs
    :func:`check_outputs` refuses an output that is one of the inputs (same path after
    resolving symlinks, or the same file through a hard link: same device and inode), or
    that lies inside an input run bundle's ``raw/`` folder or is its ``manifest.json``,
    and refuses to overwrite an existing file that looks like a trace, a bundle manifest
    or a rule pack. Any other existing file is overwritten: ``-o`` means "write here".
    :func:`write_text`, :func:`write_bytes` and :func:`write_json` write atomically (a
    temporary file in the same folder, then ``rename``), so a crash or a full disk never
    leaves half a report — or half of anything else; an unwritable destination is one
    :class:`~perfdoctor.errors.UsageError`. :func:`dumps_json` is strict JSON: NaN and
    infinities become ``null``, never ``NaN``/``Infinity``.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterable

from perfdoctor.errors import UsageError
from perfdoctor.text import nbytes

# _late: gzip, json and tempfile (with shutil, random, bz2, lzma) are imported where they are
# used, not with this module: ``perfdoctor analyze`` imports it before its decoders fork, and
# the ~3 ms of those imports then held the fork back; pandas imports them anyway afterwards,
# while the decoders work.

MAX_BYTES_ENV = "PERFDOCTOR_MAX_TRACE_BYTES"
DEFAULT_MAX_BYTES = 2 * 1024**3  # 2 GiB: real Kineto traces run to hundreds of MB
CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"


def cache_dir() -> Path:
    """perfdoctor's cache folder: ``$XDG_CACHE_HOME/perfdoctor``, default ``~/.cache/perfdoctor``
    (calibrations, built cubins)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfdoctor"


# --------------------------------------------------------------------------- inputs


def max_input_bytes() -> int:
    """The most bytes perfdoctor reads from one input (after decompression)."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(float(text)) if text.lower() not in ("inf", "nan") else -1
    except (ValueError, OverflowError):  # OverflowError: 1e400 is an infinite float
        value = -1
    if value <= 0:
        raise UsageError(f"{MAX_BYTES_ENV}={text!r}: expected a positive number of bytes, e.g. {2 * DEFAULT_MAX_BYTES}")
    return value


def _too_big(path: Path, cap: int, what: str) -> UsageError:
    return UsageError(
        f"{path}: {what} more than {nbytes(cap, binary=True)} (the input cap); to read it, raise the cap, "
        f"e.g. {MAX_BYTES_ENV}={2 * cap}"
    )


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def regular_file(path: str | Path, what: str = "") -> os.stat_result:
    """``path``'s stat when it is (or links to) a regular file; else a UsageError."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file{' (' + what + ')' if what else ''}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise UsageError(f"{path}: is {kind}, not a regular file; perfdoctor reads only regular files")
    return st


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_capped(path: str | Path) -> bytes:
    """A regular file's bytes, at most :func:`max_input_bytes` of them (else a UsageError)."""
    path = Path(path)
    regular_file(path)
    cap = max_input_bytes()
    with _open(path) as fh:
        try:
            data = fh.read(cap + 1)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > cap:
        raise _too_big(path, cap, "is")
    return data


def _gunzip_chunks(path: Path, fh: BinaryIO) -> Iterable[bytes]:
    """Decompressed chunks of a gzip stream (all members), capped: never more than one
    byte past the cap is decompressed, so a bomb is refused as soon as it passes it."""
    import gzip  # here, not with the module: see _late below

    cap = max_input_bytes()
    total = 0
    try:
        with gzip.GzipFile(fileobj=fh) as gz:
            while True:
                chunk = gz.read(min(CHUNK, cap + 1 - total))
                if not chunk:
                    return
                total += len(chunk)
                if total > cap:
                    raise _too_big(path, cap, "decompresses to")
                yield chunk
    except (EOFError, OSError, zlib.error) as exc:
        raise UsageError(f"{path}: damaged gzip file ({exc})") from None


def read_maybe_gzip(path: str | Path) -> bytes | memoryview:
    """The file's bytes, decompressed (streaming, capped) when it is gzip; a leading UTF-8
    BOM is dropped. A truncated archive or an oversized input is a UsageError.

    An uncompressed file comes back mapped (:func:`_mapped`, a read-only memoryview) where
    the system allows it: a trace is read once, front to back, and copying 200 MB out of
    the page cache first costs ~0.15 s and as much memory again."""
    path = Path(path)
    regular_file(path)
    with _open(path) as fh:
        if fh.read(2) != GZIP_MAGIC:
            data: bytes | memoryview | None = _mapped(path, fh)
            fh.close()
            if data is None:
                data = read_capped(path)
        else:
            fh.seek(0)
            # Grown in place, not joined from a list of chunks: the list and the joined copy
            # would hold the output twice (a 2 GiB bomb took 3.86 GB); a bytearray's growth
            # is a realloc (mremap for large blocks), so the peak stays near the output.
            buffer = bytearray()
            for chunk in _gunzip_chunks(path, fh):
                buffer += chunk
            data = memoryview(buffer)
    return data[len(UTF8_BOM):] if data[: len(UTF8_BOM)] == UTF8_BOM else data


def _mapped(path: Path, fh: BinaryIO) -> memoryview | None:
    """The open file mapped read-only into memory (capped), or None where it cannot be
    (an empty file, a file system without mmap): then it is read.

    A file that is truncated while mapped ends the process with SIGBUS when the missing
    pages are touched; a trace is not rewritten while it is analysed, and the outputs are
    written only after the analysis, atomically, so none is left half-written."""
    try:
        size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    cap = max_input_bytes()
    if size > cap:
        raise _too_big(path, cap, "is")
    if size == 0:
        return None
    # Each page is mapped when first read, not all at once (MAP_POPULATE): the forked decoders
    # of a large trace (kineto_events.SlicedDecode) do not inherit a shared file mapping's
    # pages and map their spans' again, so populating ahead mapped ~2/3 of them for nothing,
    # before the fork, while no other process works. HF 80 MB at load 5: the pages alone,
    # 17-29 ms populated against 0.4 ms lazily up to the fork, the read by two processes no
    # slower; perfdoctor analyze from the decoders' import to the fork, median of 6, 0.040
    # -> 0.024 s. One process reading every page costs the same either way (43-55 ms
    # populated, 49-53 ms one fault at a time).
    try:
        mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        return None
    return memoryview(mapping)


def gunzip_to(path: str | Path, out: Path) -> None:
    """Decompress ``path`` (gzip) into ``out``, streaming and capped."""
    path = Path(path)
    regular_file(path)
    with _open(path) as fh, open(out, "wb") as dst:
        for chunk in _gunzip_chunks(path, fh):
            dst.write(chunk)


def read_json(path: str | Path) -> Any:
    """A small JSON file (capped; BOM accepted); malformed or too deeply nested → UsageError."""
    path = Path(path)
    import json  # (see _late below)

    data = read_capped(path)
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    try:
        return json.loads(data)
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"{path}: not valid JSON ({exc})") from None


# --------------------------------------------------------------------------- outputs

PROTECTED_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep", ".qdrep", ".ncu-rep", ".toml", ".gz", ".jsonl")
SNIFF_BYTES = 1 << 20


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def looks_like_input(path: Path) -> str | None:
    """What an existing file looks like when perfdoctor must not overwrite it, else None."""
    name = path.name.lower()
    for suffix in PROTECTED_SUFFIXES:
        if name.endswith(suffix):
            return f"a {suffix} file (a trace, export or rule pack)"
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return None
    if head.startswith(b"SQLite format 3\x00"):
        return "an SQLite database"
    if head.startswith(GZIP_MAGIC):
        return "a gzip file"
    if b'"traceEvents"' in head:
        return "a Kineto trace"
    if b'"perfdoctor.run/' in head:
        return "a run bundle manifest"
    if b"[[rule]]" in head:
        return "a rule pack"
    return None


def check_outputs(outputs: Iterable[str | Path | None], inputs: Iterable[str | Path | None]) -> None:
    """Refuse (UsageError) outputs that would destroy an input (see the module docstring)."""
    ins = [Path(p) for p in inputs if p is not None and str(p) != "seed"]
    outs = [Path(p) for p in outputs if p is not None]
    in_real = [(p, os.path.realpath(p), _stat(p)) for p in ins]
    bundle_guards: list[tuple[Path, str, list[os.stat_result]]] = []
    for p, real, st in in_real:
        if st is not None and stat.S_ISDIR(st.st_mode):
            files = [s for s in (_stat(f) for f in _walk(Path(real))) if s is not None]
            bundle_guards.append((p, real, files))
    seen: dict[str, Path] = {}
    for out in outs:
        real = os.path.realpath(out)
        if real in seen:
            raise UsageError(f"{out}: given as two outputs (also {seen[real]}); pick distinct files")
        seen[real] = out
        st = _stat(out)
        for p, in_path, in_st in in_real:
            if real == in_path or (st is not None and in_st is not None and _same(st, in_st)):
                raise UsageError(f"{out}: is also an input ({p}); refusing to overwrite it — write the output elsewhere")
        for p, bundle, files in bundle_guards:
            inside = os.path.commonpath([real, bundle]) == bundle
            rel = os.path.relpath(real, bundle) if inside else ""
            if inside and (rel == "." or rel == "manifest.json" or rel.split(os.sep)[0] == "raw"):
                raise UsageError(f"{out}: is part of the input bundle {p} (its manifest or raw files); write the output elsewhere")
            if st is not None and any(_same(st, f) for f in files):
                raise UsageError(f"{out}: is a file of the input bundle {p} (a hard link); write the output elsewhere")
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise UsageError(f"{out}: is a directory; give a file name")
            if stat.S_ISREG(st.st_mode):
                looks = looks_like_input(Path(real))
                if looks:
                    raise UsageError(
                        f"{out}: exists and looks like {looks}; perfdoctor overwrites only report files — "
                        "remove it first or pick another name"
                    )


def _walk(root: Path, limit: int = 10_000) -> list[Path]:
    """Files of a bundle (manifest and raw/), for the hard-link check; bounded."""
    found: list[Path] = []
    for base in (root / "manifest.json", root / "raw"):
        if base.is_file():
            found.append(base)
        elif base.is_dir():
            for dirpath, _dirs, files in os.walk(base):
                found.extend(Path(dirpath) / f for f in files)
                if len(found) > limit:
                    return found
    return found


def write_bytes(path: str | Path, data: bytes, follow_links: bool = True) -> None:
    """Write ``data`` atomically: a temporary file beside the target, then rename. A symlink
    is followed (its target is replaced); an existing non-regular file (``/dev/stdout``, a
    FIFO) is written directly. Failures are one UsageError.

    ``follow_links=False`` is for files perfdoctor names itself inside a folder it did not
    make (the reports written into a downloaded bundle): whatever is at the name — a link
    to a file outside the bundle or to the bundle's own trace, a FIFO — is replaced by the
    new file, never written through."""
    path = Path(path)
    if follow_links:
        target = Path(os.path.realpath(path))
        st = _stat(target)
    else:
        target = Path(os.path.realpath(path.parent)) / path.name
        try:
            st = os.lstat(target)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            st = None  # a link, FIFO or device at the name: replaced by the rename below
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(target, "wb") as fh:
                fh.write(data)
            return
        import tempfile  # (see _late below)

        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str, append: bool = False, follow_links: bool = True) -> None:
    """Write UTF-8 text atomically (or append, for logs such as ``$GITHUB_STEP_SUMMARY``);
    ``follow_links`` as in :func:`write_bytes`."""
    if not append:
        write_bytes(path, text.encode("utf-8", "replace"), follow_links)
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def finite(obj: Any) -> Any:
    """``obj`` as plain JSON data with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, dict):
        return {(k if isinstance(k, str) else str(k)): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [finite(v) for v in obj]
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return finite(obj.item())
        if isinstance(obj, np.ndarray):
            return finite(obj.tolist())
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def dumps_json(payload: Any) -> str:
    """Strict, indented JSON text (UTF-8 characters kept; NaN/inf → null), newline-terminated."""
    import json  # (see _late below)

    return json.dumps(finite(payload), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | Path, payload: Any, follow_links: bool = True) -> None:
    """Strict JSON (see :func:`dumps_json`), written atomically: every JSON file perfdoctor
    writes goes through here (``follow_links`` as in :func:`write_bytes`)."""
    write_text(path, dumps_json(payload), follow_links=follow_links)
