"""`python launcher.py EXIT_FILE -- COMMAND...`: runs one local job process and records its exit.

The executor starts every local worker through this small parent, in a new session, because
the job must outlive a restart of the executor: a restarted executor is no longer the job's
parent and cannot `wait()` for its exit code, but it can read the file written here.

Stop signals go to the whole process group, so the job gets SIGTERM directly. The launcher
notes it and keeps waiting, to write the job's code; SIGKILL ends both, and then no file is
written, which the executor reads as "killed". Standard library only: it starts fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def write_exit(path: Path, code: int | None, detail: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"code": code, "detail": detail}))
    os.replace(tmp, path)  # atomic: the executor never reads half a file


def describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: launcher.py EXIT_FILE -- COMMAND...\n")
        return 2
    exit_file, command = Path(argv[0]), argv[2:]
    # A handler, not SIG_IGN: ignored signals are inherited by the job, handlers are not.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        job = subprocess.Popen(command)
    except OSError as exc:
        detail = f"cannot start {command[0]!r}: {exc.strerror or exc}"
        sys.stderr.write(f"rota: {detail}\n")
        write_exit(exit_file, 127, detail)
        return 127
    code = job.wait()  # retried across our no-op signal handlers (PEP 475)
    write_exit(exit_file, code, describe(code))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
