import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real `perfdoctor` command in a subprocess (python -m, so the venv's package is used)."""
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
