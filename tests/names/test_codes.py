"""namecodes.factorize numbers names exactly as pandas.factorize (use_na_sentinel=False)
does — by first appearance, a missing value a unique of its own — whether equal names
share one object (the loaders' names) or each row has its own (a decoder's strings)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from perfdoctor.names.codes import factorize

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
    from perfdoctor.names.codes import factorize_strings

    codes, uniques = factorize_strings([fresh(v) for v in values])
    want_codes, want_uniques = pd.factorize(np.array(values, dtype=object))
    assert codes.tolist() == want_codes.tolist() and list(uniques) == list(want_uniques)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(value, max_size=40), copies=st.lists(st.booleans(), max_size=40), prefix=st.sampled_from(["cuda", "", "void g", "é", "x"]))
def test_starts_with_is_pandas_str_startswith(values, copies, prefix):
    """What step finding and the declarations filter ranges by: pandas' answer with
    ``na=False`` (a missing name starts with nothing), shared and distinct objects alike."""
    from perfdoctor.names.codes import starts_with

    rows = [fresh(v) if i < len(copies) and copies[i] else v for i, v in enumerate(values)]
    col = pd.Series(rows, dtype=object)
    assert starts_with(col, prefix).tolist() == col.str.startswith(prefix, na=False).astype(bool).tolist()


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(word, st.integers(min_value=0, max_value=10**12)), min_size=1, max_size=60))
def test_tally_is_pandas_groupby_count_and_sum(rows):
    """What the evidence tables group by (kernel families, launch calls): the same counts,
    sums and key order as pandas' groupby, which hashes every row."""
    from perfdoctor.names.codes import tally

    keys = np.array([fresh(k) for k, _ in rows], dtype=object)
    values = np.array([v for _, v in rows], dtype=np.int64)
    got = tally(pd.Series(keys), values)
    want = pd.DataFrame({"k": keys, "v": values}).groupby("k").agg(count=("v", "size"), total=("v", "sum"))
    assert got.index.tolist() == want.index.tolist()
    assert got["count"].tolist() == want["count"].tolist() and got["total"].tolist() == want["total"].tolist()
    assert got.sort_values("total", ascending=False).index.tolist() == want.sort_values("total", ascending=False).index.tolist()


def test_a_remembered_answer_is_given_only_for_the_same_objects():
    """factorize remembers its answers for arrays of strings (the host calls' names are
    factorized 14 times per analysis): only the very same objects in the same order get
    the remembered codes; anything else is factorized afresh."""
    names = np.array(["".join(["launch", str(i % 3)]) for i in range(5000)], dtype=object)
    first = factorize(names)
    first[0][:] = 99  # a caller changing its codes does not change the next answer
    again = factorize(names)
    assert again[0].tolist() == [i % 3 for i in range(5000)] and list(again[1]) == ["launch0", "launch1", "launch2"]
    names[4999] = "other"  # the array changed in place: that row's object is another one
    changed = factorize(names)
    assert changed[0][-1] == 3 and changed[1][-1] == "other"
    equal_but_new = np.array(["".join(["launch", str(i % 3)]) for i in range(5000)], dtype=object)
    assert factorize(equal_but_new)[0].tolist() == [i % 3 for i in range(5000)]
    assert factorize(names[::-1])[0][0] == 0 and factorize(names[::-1])[1][0] == "other"
