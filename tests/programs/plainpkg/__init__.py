"""A package that re-exports its module's function, as libraries do (monai.inferers binds
monai.inferers.utils.sliding_window_inference): --step-fn plainpkg.ops:rescale must make
the name plain_fn.py calls, plainpkg.rescale, a step too."""

from plainpkg.ops import rescale

__all__ = ["rescale"]
