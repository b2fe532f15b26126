"""`python -m rota_submission`: run the submission service."""

from rota.service import run_forever

from rota_submission.app import build

if __name__ == "__main__":
    run_forever(build())
