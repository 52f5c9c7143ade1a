"""What names mean: kernels, host APIs and the codes that make name tests fast.

- ``kernels``   a kernel's display label, its match key across runs, GEMM precision
- ``families``  kernel families across vendors (GEMM, attention, communication, ...)
- ``api``       host API names across vendors and tracers: launch, sync, copy, capture
- ``codes``     names as categories: per-row codes and the table of distinct names
- ``ranges``    what a host range's name says it is: a serving step, a compiled call, a loop marker,
                a library's range, a warm-up (standard library only: the bootstrap reads it)

May import: profile's schema (no Profile), io, text, errors. Pure functions over strings and
arrays; nothing here reads a file.
"""
