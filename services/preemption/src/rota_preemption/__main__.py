"""`python -m rota_preemption`: run the preemption service."""

from rota.service import run_forever

from rota_preemption.app import build

if __name__ == "__main__":
    run_forever(build())
