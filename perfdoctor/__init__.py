"""perfdoctor: a doctor for GPU inference performance.

Profile a program (or read a trace you already have), measure what the low-latency
literature says matters, check it against documented thresholds and rank the fixes by
the time they should win back.
"""

__version__ = "0.1.0"
