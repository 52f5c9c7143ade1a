"""perfdoctor: a doctor for GPU inference performance.

Profile a program (or read a trace you already have), measure what the low-latency
literature says matters, check it against documented thresholds and rank the fixes by
the time they should win back.

In your own program, mark steps so every tool sees them::

    import perfdoctor
    for _ in range(n_tokens):
        with perfdoctor.region("decode_step", tokens=1):
            next_token = decode(next_token)
"""

from perfdoctor.api import end_step, region, step

__version__ = "0.1.0"
__all__ = ["end_step", "region", "step"]
