"""`python -m rota_scheduler`: run the scheduler service."""

from rota.service import run_forever

from rota_scheduler.app import build

if __name__ == "__main__":
    run_forever(build())
