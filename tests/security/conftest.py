"""The live attacks use the integration tests' servers and submission service."""

from tests.integration.conftest import nc, submission

__all__ = ["nc", "submission"]
