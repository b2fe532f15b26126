"""`python -m rota_console`: serve the web console with uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from rota_console.app import build
from rota_console.settings import ConsoleSettings


def main() -> None:
    settings = ConsoleSettings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # No access log: URLs carry job ids, not secrets, but a quiet log is easier to read.
    uvicorn.run(build(settings), host=settings.bind, port=settings.port, access_log=False,
                log_level="warning", timeout_graceful_shutdown=2)


if __name__ == "__main__":
    main()
