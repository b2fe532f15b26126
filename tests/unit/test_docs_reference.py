"""The generated reference pages (docs/reference/) match the code they describe."""

from __future__ import annotations

from pathlib import Path

import pytest
from rota.docsite import reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", [reference.CLI_PAGE, reference.CONFIG_PAGE, reference.ENVIRONMENT_PAGE,
                                  reference.METRICS_PAGE],
                         ids=str)
def test_the_committed_page_is_what_the_code_generates(page: Path) -> None:
    generated = reference.pages()[page]
    committed = (ROOT / page).read_text()
    assert committed == generated, (
        f"{page} differs from the code: run `uv run python -m rota.docsite.reference`")


def test_every_command_and_every_config_section_has_its_heading() -> None:
    import typer.main
    from rota.cli.main import app
    from rota.config.model import RotaConfig, Team

    cli = reference.cli_reference()
    root = typer.main.get_command(app)
    for name in root.commands:  # type: ignore[attr-defined]
        assert f"## `rota {name}`" in cli
    assert "## `rota cluster drain`" in cli
    config = reference.config_reference()
    for section in ("RotaConfig", "Team", "Budget", "Queue", "Preemption", "KubernetesPolicy"):
        assert f"## {section}" in config
    for key in [*RotaConfig.model_fields, *Team.model_fields]:
        assert f"| `{key}` |" in config


def test_every_settings_field_is_an_environment_variable_on_the_page() -> None:
    from rota.settings import Settings

    page = reference.environment_reference()
    for field in Settings.model_fields:
        assert f"| `ROTA_{field.upper()}` |" in page
    assert "| `ROTA_CONSOLE_PORT` | int | `8089` |" in page


def test_check_names_a_stale_page(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for page, text in reference.pages().items():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text(text)
    monkeypatch.chdir(tmp_path)
    assert reference.main(["--check"]) == 0
    (tmp_path / reference.CONFIG_PAGE).write_text("# edited by hand\n")
    assert reference.main(["--check"]) == 1
    assert str(reference.CONFIG_PAGE) in capsys.readouterr().out


def test_every_metric_family_has_its_row() -> None:
    from rota import metrics

    page = reference.metrics_reference()
    assert metrics.NAMES and all(f"| `{name}` |" in page for name in metrics.NAMES)


def test_the_metrics_page_lists_the_catalogs_values_not_what_this_process_counted() -> None:
    from rota import metrics
    from rota.docsite.reference import metrics_reference

    before = metrics_reference()
    forged = next(f for f in metrics._families() if metrics.family_name(f) == "rota_forged_messages_total")
    forged.labels(subject="rota.evt.counted.in.this.process").inc()
    assert metrics_reference() == before
