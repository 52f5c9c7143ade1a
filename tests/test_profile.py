"""The Profile's contract beyond its tables: what the source said of itself is typed."""

from __future__ import annotations

import dataclasses

import pytest

from perfdoctor.profile import BundleFacts, Origin, Profile


def test_a_profile_has_an_origin_and_no_free_form_meta() -> None:
    assert "meta" not in {f.name for f in dataclasses.fields(Profile)}
    assert not hasattr(Profile(), "meta")
    assert isinstance(Profile().origin, Origin)


def test_an_origin_is_frozen_so_a_loader_replaces_it_rather_than_editing_it() -> None:
    origin = Origin(source="kineto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        origin.source = "nsys"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BundleFacts().step = "decode_step"  # type: ignore[misc]


def test_an_origin_says_nothing_it_was_not_told() -> None:
    """Absent facts are None or empty, never a guessed value."""
    origin = Origin()
    assert all(getattr(origin, f.name) in (None, (), {}) for f in dataclasses.fields(Origin))
