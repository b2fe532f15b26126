"""`python -m rota_notifier`: run the notifier service."""

from rota.service import run_forever

from rota_notifier.app import build

if __name__ == "__main__":
    run_forever(build())
