"""Names as categories: codes per row and the table of distinct names.

A 200 MB trace has a million events and a few hundred distinct names, so every name test
(launch, sync, copy kind, family, label, NCCL, base name) runs once per distinct name and
is mapped back by code. :func:`factorize` is what makes that cheap: the loaders give equal
names the same string object, so rows are first grouped by object identity (addresses,
hashed as integers), and only the few distinct objects are compared as strings. Names built
some other way (distinct objects for equal strings) still factorize correctly, at the
speed of :func:`pandas.factorize`.

pandas is imported by the functions that use it, not with the module: the forked decoders
of a trace number names with :func:`factorize_strings` before pandas is imported (see
:mod:`perfdoctor.schema`).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def factorize(names: pd.Series | np.ndarray | list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` with ``uniques[codes]`` equal to ``names``, uniques in order of
    first appearance (as :func:`pandas.factorize` numbers them); a missing name is a unique
    of its own, never code -1."""
    import pandas as pd

    arr = names.to_numpy(dtype=object) if isinstance(names, pd.Series) else np.asarray(names, dtype=object)
    if arr.ndim != 1:  # a list of tuples would become 2-D: build it one object per row
        flat = np.empty(len(names), dtype=object)
        flat[:] = list(names)
        arr = flat
    if arr.size == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=object)
    by_object, _ = pd.factorize(_addresses(arr))  # integers: hashed fast, numbered by first appearance
    first = np.flatnonzero(by_object > np.maximum.accumulate(np.r_[-1, by_object[:-1]]))  # first row of each object
    by_value, uniques = factorize_values(arr[first])  # the few objects, as strings
    return by_value[by_object], uniques


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


def equals(column: pd.Series | np.ndarray, value: str) -> np.ndarray:
    """``column == value`` as a boolean array, for an object column of names or labels
    (``kind``, ``host_mem``, families): numpy compares an object array about 4x faster
    than pandas, which checks every element for a missing value first. A missing value
    (None, NaN) equals no string, as in pandas."""
    arr = column.to_numpy() if hasattr(column, "to_numpy") else column  # a Series (or Index), else an array
    return np.asarray(arr == value, dtype=bool)


def per_name(names: pd.Series, fn: Callable[[Any], Any]) -> pd.Series:
    """``names.map(fn)``, with ``fn`` called once per distinct name (same index as ``names``)."""
    import pandas as pd

    codes, uniques = factorize(names)
    per_unique = np.empty(len(uniques), dtype=object)
    per_unique[:] = [fn(u) for u in uniques]
    return pd.Series(per_unique[codes], index=names.index, dtype=object)
