"""`rota up` on embedded defaults as an e2e test drives it: the command, its log, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROTA = str(Path(sys.executable).parent / "rota")


def up_log(home: Path) -> str:
    return (home / "up.log").read_text()


def rota(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROTA, *args], env=env, capture_output=True, text=True, timeout=60)
