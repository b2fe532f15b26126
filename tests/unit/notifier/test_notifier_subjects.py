"""The notifier's durable is filtered to the subjects of `ingest.RELEVANT`: an event type the
domain starts to read but that is missing there would silently never arrive."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

from rota.contracts.subjects import EVENT_SUBJECTS
from rota_notifier import domain, ingest


def event_types_checked(module: ModuleType) -> set[str]:
    """The `m.<Event>` names `module` tests with `isinstance`."""
    checked = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance" and isinstance(node.args[1], ast.Attribute)
                and isinstance(node.args[1].value, ast.Name) and node.args[1].value.id == "m"):
            checked.add(node.args[1].attr)
    return checked


def test_every_event_the_notifier_reads_is_among_its_durables_subjects() -> None:
    read = event_types_checked(domain) | event_types_checked(ingest)
    relevant = {kind.__name__ for kind in ingest.RELEVANT}
    assert "PreemptionNoticed" in read and "JobPending" in read
    assert read <= relevant
    assert set(ingest.SUBJECTS) == {EVENT_SUBJECTS[name] for name in relevant}
    assert EVENT_SUBJECTS["AllocationGranted"] not in ingest.SUBJECTS
