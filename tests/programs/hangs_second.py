"""Twelve short steps the first time it runs; from the second time on it steps forever,
after touching DIR/ready — so a test can stop ``perfdoctor run --repeat`` in its second
light process. argv[1] is DIR, where each start leaves a file."""

import pathlib
import sys
import time

import perfdoctor.api as perfdoctor

folder = pathlib.Path(sys.argv[1])
starts = len(list(folder.glob("start-*")))
(folder / f"start-{starts}").touch()
i = 0
while starts == 0 and i < 12 or starts > 0:
    with perfdoctor.region("train_step"):
        time.sleep(0.01)
    i += 1
    if starts > 0 and i == 3:
        (folder / "ready").touch()
