"""Redaction, and the messages the channels build (no network here)."""

from __future__ import annotations

import logging

from pydantic import SecretStr
from rota.settings import Settings
from rota_notifier.channels import Outgoing, Smtp, slack_blocks
from rota_notifier.redact import MASK, RedactingFilter, Redactor
from rota_notifier.render import Rendered

URL = "https://hooks.slack.com/services/T000/B000/abcdefSECRET"


def test_redactor_masks_configured_secrets_and_their_url_paths() -> None:
    redactor = Redactor([SecretStr("http://127.0.0.1:9/services/T1/B1/zzzSECRET"),
                         SecretStr("pw-123456"), None, SecretStr("")])
    text = "POST http://127.0.0.1:9/services/T1/B1/zzzSECRET failed; body /services/T1/B1/zzzSECRET"
    assert redactor.redact(text) == f"POST {MASK} failed; body {MASK}"
    assert redactor.redact("login with pw-123456") == f"login with {MASK}"


def test_redactor_masks_slack_secrets_it_was_never_told_about() -> None:
    redactor = Redactor([])
    assert redactor.redact(f"see {URL} now") == f"see {MASK} now"
    assert redactor.redact("token xoxb-123-456-abc") == f"token {MASK}"
    assert redactor.redact("{'Authorization': 'Bearer abc.def'}") == (
        f"{{'Authorization': '{MASK}'}}")


def test_settings_never_print_secrets() -> None:
    settings = Settings(slack_webhook_url=SecretStr(URL), slack_token=SecretStr("xoxb-1-2-3"),
                        smtp_password=SecretStr("pw-123456"))
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "abcdefSECRET" not in text and "xoxb-1-2-3" not in text and "pw-123456" not in text


def test_log_filter_masks_messages_and_tracebacks() -> None:
    record_filter = RedactingFilter(Redactor([SecretStr("pw-123456")]))
    try:
        raise RuntimeError("auth pw-123456 refused")
    except RuntimeError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "using %s", ("pw-123456",),
                                   sys.exc_info())
    assert record_filter.filter(record)
    assert record.getMessage() == f"using {MASK}"
    assert record.exc_text is not None and "pw-123456" not in record.exc_text


RENDERED = Rendered(subject="[Rota] Preemption: x", text="plain body", html="<p>html body</p>",
                    slack="*mrkdwn* body")


def test_email_is_multipart_plain_and_html() -> None:
    smtp = Smtp(Settings(smtp_host="127.0.0.1", smtp_from="rota@example.com"))
    message = smtp.build(Outgoing("n-1", "alice@example.com", "user", RENDERED))
    assert message.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]
    assert message["Auto-Submitted"] == "auto-generated" and message["To"] == "alice@example.com"


def test_slack_blocks_mention_only_when_posting_to_a_shared_channel() -> None:
    message = Outgoing("n-1", "U0ALICE", "user", RENDERED)
    header, section, context = slack_blocks(message, mention=True)
    assert header["text"]["text"] == "[Rota] Preemption: x"
    assert section["text"]["text"].startswith("<@U0ALICE> *mrkdwn*")
    assert "n-1" in context["elements"][0]["text"]
    assert not slack_blocks(message, mention=False)[1]["text"]["text"].startswith("<@")
