"""Last checks every loader runs on the Profile it built, so hostile or damaged traces
cannot silently change the metrics:

- rows whose end precedes their start (a negative duration) are dropped and counted;
- a correlation id shared by several host launches is ambiguous — the kernels it names
  would all attach to one launch (and so to one step): the id is cleared on those calls
  and activities (they count as unattributed) and the loader says how many;
- names (kernels, API calls, ranges) are cleaned of control characters, escape sequences
  and bidi overrides (:func:`perfdoctor.text.clean`), once, here.

What was dropped or changed is listed in ``profile.origin.warnings``, which the commands
print.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from perfdoctor.names.codes import factorize
from perfdoctor.profile import Profile
from perfdoctor.text import clean


def _clean_names(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "name" not in df:
        return df
    names = df["name"]
    unclean = {s for s in factorize(names)[1] if not (isinstance(s, str) and s.isprintable())}  # few distinct names
    if unclean:
        df = df.copy()
        df["name"] = names.map(lambda s: clean(s) if s in unclean else s)
    return df


def _drop_negative(df: pd.DataFrame, what: str, warnings: list[str]) -> pd.DataFrame:
    if df.empty:
        return df
    bad = df["end_ns"] < df["start_ns"]
    n = int(bad.sum())
    if n:
        warnings.append(f"{n} {what} with a negative duration dropped")
        df = df[~bad].reset_index(drop=True)
    return df


def finish(profile: Profile) -> Profile:
    """Apply the checks above to ``profile`` (in place) and return it."""
    warnings: list[str] = list(profile.origin.warnings)
    profile.activities = _clean_names(_drop_negative(profile.activities, "GPU activities", warnings))
    profile.calls = _clean_names(_drop_negative(profile.calls, "host API calls", warnings))
    profile.ranges = _clean_names(_drop_negative(profile.ranges, "ranges", warnings))
    profile.ops = _clean_names(_drop_negative(profile.ops, "CPU ops", warnings))

    calls = profile.calls
    if not calls.empty:
        ids = calls["correlation"]
        shared = ids[(ids >= 0) & ids.duplicated(keep=False)]
        if not shared.empty:
            dup = set(shared.unique().tolist())
            n_calls = int(ids.isin(dup).sum())
            acts = profile.activities
            hit = acts["correlation"].isin(dup) if not acts.empty else pd.Series([], dtype=bool)
            warnings.append(
                f"{len(dup)} correlation ids are shared by {n_calls} host calls (expected one call each): "
                f"{int(hit.sum())} GPU activities with those ids are left unattributed to a launch"
            )
            profile.calls = calls.assign(correlation=ids.where(~ids.isin(dup), -1))
            if not acts.empty:
                profile.activities = acts.assign(correlation=acts["correlation"].where(~hit, -1))
    if profile.device.get("name") is not None:
        profile.device["name"] = clean(profile.device["name"])
    profile.origin = replace(profile.origin, warnings=tuple(warnings))
    return profile
