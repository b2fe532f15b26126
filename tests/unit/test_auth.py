"""Rota's identities as data: the JWTs, the permission table, what the CLI reads of creds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from rota.auth import senders
from rota.auth.jwt import USER, KeyPair, claims_of, decode, encode, read_creds, verify
from rota.auth.keys import AuthDir, run_creds
from rota.auth.permissions import (
    EVENT_OWNERS,
    SERVICES,
    service_permissions,
    team_permissions,
)
from rota.bus.options import connect_options, creds_team
from rota.contracts.subjects import EVENT_SUBJECTS
from rota.db.engine import make_engine
from rota.ids import new_id
from rota.settings import Settings

from tests.unit.notifier.events import pending


def test_a_jwt_is_believed_only_with_its_issuers_signature() -> None:
    issuer = KeyPair.create(USER)
    token = encode({"sub": "x", "nats": {"type": "user"}}, issuer)
    assert decode(token)["iss"] == issuer.public
    head, _, signature = token.split(".")
    forged = encode({"sub": "y", "nats": {"type": "user"}}, issuer).split(".")[1]
    with pytest.raises(ValueError, match="signature"):
        decode(f"{head}.{forged}.{signature}")
    assert not verify(issuer.public, b"data", issuer.sign(b"other data"))
    assert verify(issuer.public, b"data", issuer.sign(b"data"))


def test_every_event_is_published_by_exactly_its_owners() -> None:
    for event, subject in EVENT_SUBJECTS.items():
        publishers = {s for s in SERVICES if subject in service_permissions(s).publish}
        assert publishers == EVENT_OWNERS[event] - {"run"}, event


def test_a_team_has_no_jetstream_and_only_its_own_subjects() -> None:
    nlp = team_permissions("nlp")
    assert not any(p.startswith("$JS") for p in (*nlp.publish, *nlp.subscribe))
    assert all(p.endswith(".nlp") for p in nlp.publish)
    assert nlp.subscribe == ("_INBOX_team_nlp.>", "rota.feed.nlp.>")


def test_a_runs_credentials_name_the_run_and_the_scoped_key(tmp_path: Path) -> None:
    auth = AuthDir(tmp_path).ensure()
    seed = auth.run_signing_key.read_text().strip()
    account = auth.account_public_file.read_text().strip()
    user_jwt, user_seed = read_creds(run_creds("run-1", seed, account))
    claims = decode(user_jwt)
    assert claims["name"] == "run-1" and claims["iss"] == KeyPair.from_seed(seed).public
    assert claims["nats"]["issuer_account"] == account
    assert "pub" not in claims["nats"]  # the server applies the scoped template, nothing else
    assert claims["sub"] == KeyPair.from_seed(user_seed).public


def test_the_cli_speaks_as_the_team_its_credentials_name(tmp_path: Path) -> None:
    auth = AuthDir(tmp_path / "auth").ensure()
    creds = auth.issue_team("vision", "carol", tmp_path / "carol.creds")
    assert creds_team(creds) == "vision"
    assert creds.stat().st_mode & 0o077 == 0  # readable by its owner only
    options = connect_options(Settings(home=tmp_path, nats_creds=creds))
    assert options["inbox_prefix"] == "_INBOX_team_vision"
    assert claims_of(read_creds(creds.read_text())[0])["name"] == "vision/carol"
    assert creds_team(auth.creds_path("ledger")) is None


def test_database_errors_name_no_bound_value() -> None:
    engine = make_engine("postgresql://nobody@127.0.0.1:1/none")
    assert engine.sync_engine.hide_parameters


def test_a_service_believes_its_own_messages_without_verifying_them_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler, ledger = senders.Signer(KeyPair.create(USER)), senders.Signer(KeyPair.create(USER))
    check = senders.SenderCheck(senders.Roster({scheduler.public: "scheduler",
                                                ledger.public: "ledger"}))
    subject = EVENT_SUBJECTS["JobPending"]
    body = pending(datetime(2026, 12, 4, tzinfo=UTC), new_id()).to_bytes()
    verified: list[bytes] = []
    real_verify = senders.verify

    def counting_verify(public: str, data: bytes, signature: bytes) -> bool:
        verified.append(data)
        return real_verify(public, data, signature)

    monkeypatch.setattr(senders, "verify", counting_verify)
    monkeypatch.setattr(senders, "_signer", scheduler)
    own = scheduler.headers(body)
    assert check.refusal(subject, own, body) is None
    assert verified == []  # its own signature over exactly this body: no second check
    # The same signature over other bytes is checked, and refused.
    other = body.replace(b"scheduler", b"schedulex")
    assert check.refusal(subject, own, other) == f"{subject}: the signature does not match the body"
    assert verified == [other]
    # Another process's messages are always verified (here: the owner rule refuses first).
    foreign = ledger.headers(body)
    assert "only" in (check.refusal(subject, foreign, body) or "")
