"""namecodes.factorize numbers names exactly as pandas.factorize (use_na_sentinel=False)
does — by first appearance, a missing value a unique of its own — whether equal names
share one object (the loaders' names) or each row has its own (a decoder's strings)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from perfdoctor.namecodes import factorize

word = st.sampled_from(["cudaLaunchKernel", "void gemm<128>()", "", "nccl:all_reduce", "é"])
value = st.one_of(word, st.none(), st.just(math.nan))


def fresh(v: object) -> object:
    """An equal value in a new object (as a decoder makes one per row)."""
    return "".join(list(v)) + "" if isinstance(v, str) and v else v


@settings(max_examples=200, deadline=None)
@given(values=st.lists(value, max_size=40), copies=st.lists(st.booleans(), max_size=40))
def test_factorize_is_pandas_factorize(values, copies):
    rows = [fresh(v) if i < len(copies) and copies[i] else v for i, v in enumerate(values)]
    arr = np.empty(len(rows), dtype=object)
    arr[:] = rows
    codes, uniques = factorize(arr)
    want_codes, want_uniques = pd.factorize(arr, use_na_sentinel=False)
    assert codes.tolist() == want_codes.tolist()
    assert [u if isinstance(u, str) else None if u is None else "nan" for u in uniques] == [
        u if isinstance(u, str) else None if u is None else "nan" for u in want_uniques
    ]


def test_distinct_string_objects_share_one_unique_object():
    rows = np.array(["".join(["ab", "c"]) for _ in range(5)] + ["x"], dtype=object)
    assert len({id(r) for r in rows}) == 6
    codes, uniques = factorize(rows)
    assert codes.tolist() == [0, 0, 0, 0, 0, 1]
    assert all(r is rows[0] for r in uniques[codes][:5])  # the first object of each value


@settings(max_examples=100, deadline=None)
@given(values=st.lists(word, max_size=40))
def test_factorize_strings_is_pandas_factorize(values):
    from perfdoctor.namecodes import factorize_strings

    codes, uniques = factorize_strings([fresh(v) for v in values])
    want_codes, want_uniques = pd.factorize(np.array(values, dtype=object))
    assert codes.tolist() == want_codes.tolist() and list(uniques) == list(want_uniques)
