"""perfdoctor: a doctor for GPU inference performance.

Profile a program (or read a trace you already have), measure what the low-latency
literature says matters, check it against documented thresholds and rank the fixes by
the time they should win back.

In your own program, mark steps so every tool sees them::

    import perfdoctor
    for _ in range(n_tokens):
        with perfdoctor.region("decode_step", tokens=1):
            next_token = decode(next_token)

And read a trace or a run bundle from a notebook::

    d = perfdoctor.diagnose("trace.json.gz", step="decode_step")
    d.analysis.metrics, d.findings

``import perfdoctor`` stays light (no pandas, no torch): a program that only marks steps
pays for nothing else. ``diagnose`` loads the analysis modules when it is first used.
"""

from typing import Any

from perfdoctor.api import end_step, region, step

__version__ = "0.1.0"
__all__ = ["Diagnosis", "diagnose", "end_step", "region", "step"]


def __getattr__(name: str) -> Any:
    """``perfdoctor.diagnose`` and ``perfdoctor.Diagnosis``, imported on first use (PEP 562)."""
    if name in ("diagnose", "Diagnosis"):
        from perfdoctor import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'perfdoctor' has no attribute {name!r}")
