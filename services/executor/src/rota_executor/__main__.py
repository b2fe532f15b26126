"""`python -m rota_executor`: run the executor service."""

from rota.service import run_forever

from rota_executor.app import build

if __name__ == "__main__":
    run_forever(build())
