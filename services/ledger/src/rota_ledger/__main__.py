"""`python -m rota_ledger`: run the ledger service."""

from rota.service import run_forever

from rota_ledger.app import build

if __name__ == "__main__":
    run_forever(build())
