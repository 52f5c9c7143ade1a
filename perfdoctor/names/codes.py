"""Names as categories: codes per row and the table of distinct names.

A 200 MB trace has a million events and a few hundred distinct names, so every name test
(launch, sync, copy kind, family, label, NCCL, base name) runs once per distinct name and
is mapped back by code. :func:`factorize` is what makes that cheap: the loaders give equal
names the same string object, so rows are first grouped by object identity (addresses,
hashed as integers), and only the few distinct objects are compared as strings. Names built
some other way (distinct objects for equal strings) still factorize correctly, at the
speed of :func:`pandas.factorize`.

One analysis asks for the codes of the same column many times (every launch and sync test
of the host calls: 14 times for a Hugging Face trace), so :func:`factorize` remembers its
last few answers for arrays of strings. An answer is reused only for the very same objects
in the same order (their addresses compared row by row), and the remembered array keeps
those objects alive, so no address can be reused meanwhile; strings are immutable, so the
same objects are the same names.

pandas is imported by the functions that use it, not with the module: the forked decoders
of a trace number names with :func:`factorize_strings` before pandas is imported (see
:mod:`perfdoctor.schema`).
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def factorize(names: pd.Series | np.ndarray | list[Any], copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` with ``uniques[codes]`` equal to ``names``, uniques in order of
    first appearance (as :func:`pandas.factorize` numbers them); a missing name is a unique
    of its own, never code -1.

    ``copy=False``: a remembered answer is handed out as it is kept, not copied, for a
    caller that only reads it (indexes with the codes): the tests of a role or a prefix,
    26 and more per analysis, each a copy of a code per row otherwise."""
    import pandas as pd

    arr = names.to_numpy(dtype=object) if isinstance(names, pd.Series) else np.asarray(names, dtype=object)
    if arr.ndim != 1:  # a list of tuples would become 2-D: build it one object per row
        flat = np.empty(len(names), dtype=object)
        flat[:] = list(names)
        arr = flat
    if arr.size == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=object)
    addresses = _addresses(arr)
    known = _Remembered.lookup(addresses, copy)
    if known is not None:
        return known
    by_object, _ = pd.factorize(addresses)  # integers: hashed fast, numbered by first appearance
    first = np.flatnonzero(by_object > np.maximum.accumulate(np.r_[-1, by_object[:-1]]))  # first row of each object
    by_value, uniques = factorize_values(arr[first])  # the few objects, as strings
    codes = by_value[by_object]
    if all(type(u) is str for u in uniques):
        _Remembered.keep(arr, addresses, codes, uniques)
    return codes, uniques


class _Remembered:
    """The last answers of :func:`factorize` for arrays of strings (module docstring), at
    most :data:`ROWS` rows in all. Answers are handed out as copies: a caller may change
    its codes. A lock keeps the table whole when threads factorize at once."""

    ROWS = 1 << 21  # 2M rows in all (~50 MB with their codes): a 1 GB trace's host-call names
    answers: "OrderedDict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
    rows = 0  # the rows remembered, kept as answers come and go: summing them on every keep was quadratic in the answers
    lock = threading.Lock()

    @classmethod
    def lookup(cls, addresses: np.ndarray, copy: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
        key = (addresses.size, int(addresses[0]), int(addresses[-1]))
        with cls.lock:
            found = cls.answers.get(key)
            if found is None or not np.array_equal(found[1], addresses):
                return None
            cls.answers.move_to_end(key)
            return (found[2].copy(), found[3].copy()) if copy else (found[2], found[3])

    @classmethod
    def keep(cls, arr: np.ndarray, addresses: np.ndarray, codes: np.ndarray, uniques: np.ndarray) -> None:
        if arr.size > cls.ROWS:
            return
        # A copy of the array holds its own reference to every object: none can be freed (and its
        # address reused) while remembered, even if the caller's array changes in place.
        entry = (arr.copy(), addresses, codes.copy(), uniques.copy())
        key = (addresses.size, int(addresses[0]), int(addresses[-1]))
        with cls.lock:
            replaced = cls.answers.pop(key, None)
            cls.rows += arr.size - (replaced[0].size if replaced is not None else 0)
            cls.answers[key] = entry
            while cls.rows > cls.ROWS:
                cls.rows -= cls.answers.popitem(last=False)[1][0].size


def factorize_values(objects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`factorize` without grouping by object first (``objects``: a 1-D object
    array): strings by :func:`factorize_strings`, anything else (None, NaN among them) by
    :func:`pandas.factorize`, a missing value a unique of its own."""
    if objects.size and set(map(type, objects)) == {str}:
        return factorize_strings(objects.tolist())
    import pandas as pd

    codes, uniques = pd.factorize(objects, use_na_sentinel=False)
    return codes, np.asarray(uniques, dtype=object)


def factorize_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`factorize` of strings only — names that are distinct objects anyway, such as
    a decoder's (one per row): numbered with dicts, 2-3x faster than pandas' object hash
    table (which hashes long kernel names slowly). Uniques in order of first appearance,
    each the first object of its value."""
    index = {s: i for i, s in enumerate(dict.fromkeys(strings))}
    codes = np.fromiter(map(index.__getitem__, strings), dtype=np.intp, count=len(strings))
    return codes, np.fromiter(index, dtype=object, count=len(index))


def _addresses(arr: np.ndarray) -> np.ndarray:
    """Each element's object address (its ``id``), read from the object array's buffer of
    pointers rather than by calling ``id`` a million times. The array holds a reference to
    every element for as long as this runs, so no address can be reused meanwhile."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.itemsize != 8:  # not a 64-bit build: the portable way
        return np.fromiter(map(id, arr), dtype=np.int64, count=arr.size)
    return np.frombuffer((ctypes.c_int64 * arr.size).from_address(arr.ctypes.data), dtype=np.int64).copy()


def one_object(values: np.ndarray) -> bool:
    """Whether every element of the object array ``values`` (not empty) is the very same
    object: told by their addresses (:func:`_addresses`), not a Python call per element."""
    at = _addresses(values)
    return bool((at == at[0]).all())


def equals(column: pd.Series | np.ndarray, value: str) -> np.ndarray:
    """``column == value`` as a boolean array, for an object column of names or labels
    (``kind``, ``host_mem``, families). The value is compared with the column's few distinct
    objects (:func:`factorize`, remembered per column), not with every row: one analysis
    tests the same columns ~25 times (HF 80 MB's 47k activities: 0.07 against 0.47 ms a
    test; numpy's compare of every row was itself ~4x faster than pandas'). A missing value
    (None, NaN) equals no string, as in pandas."""
    arr = column.to_numpy() if hasattr(column, "to_numpy") else column  # a Series (or Index), else an array
    if arr.dtype != object or arr.size == 0:
        return np.asarray(arr == value, dtype=bool)
    codes, uniques = factorize(arr, copy=False)  # only read
    return np.asarray(uniques == value, dtype=bool)[codes]


def starts_with(column: pd.Series, prefix: str) -> np.ndarray:
    """``column.str.startswith(prefix, na=False)`` as a boolean array, each distinct name
    tested once (:func:`factorize`): a trace with Python stacks has ~300k range rows and a
    few thousand names, and pandas calls ``startswith`` on every row. A missing value (or
    anything not a string) starts with nothing, as with ``na=False``."""
    codes, uniques = factorize(column, copy=False)  # only read
    hit = np.fromiter((isinstance(u, str) and u.startswith(prefix) for u in uniques), dtype=bool, count=len(uniques))
    return hit[codes]


def tally(keys: pd.Series | np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """``count`` and ``total`` (the sum of ``values``, integers) per distinct key, indexed by
    the keys in sorted order: for string keys, what ``groupby(keys).agg(count="size",
    total="sum")`` gives, counted with codes (:func:`factorize`) instead of hashing every
    row's string (a missing key, which groupby drops, is a key of its own here)."""
    import pandas as pd

    codes, uniques = factorize(keys)
    out = pd.DataFrame(
        {
            "count": np.bincount(codes, minlength=len(uniques)).astype(np.int64),
            "total": np.bincount(codes, weights=values, minlength=len(uniques)).astype(np.int64),  # exact below 2**53
        },
        index=pd.Index(uniques, dtype=object),
    )
    return out.sort_index()


def per_name(names: pd.Series, fn: Callable[[Any], Any]) -> pd.Series:
    """``names.map(fn)``, with ``fn`` called once per distinct name (same index as ``names``)."""
    import pandas as pd

    codes, uniques = factorize(names, copy=False)  # only read
    per_unique = np.empty(len(uniques), dtype=object)
    per_unique[:] = [fn(u) for u in uniques]
    return pd.Series(per_unique[codes], index=names.index, dtype=object)
