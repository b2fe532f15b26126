"""The ledger service: the only writer of GPU allocations. Thin wiring; the rules live in
`domain`, the transactions in `ledger`.

- `rota.evt.allocation.proposed` (durable `ledger-proposals`): grant or reject.
- `rota.evt.run.>` (durable `ledger-runs`): a run's end releases its GPUs.
- `rota.evt.preemption.>` (durable `ledger-preemptions`): hold GPUs for a plan's preemptor.
- `rota.sys.ledger.allocations`: the read API (the scheduler's rebuild, tests, the CLI).
"""

from __future__ import annotations

from pathlib import Path

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from rota.config import RotaConfig, load_config
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.service import RotaService

from rota_ledger.api import ALLOCATIONS_SUBJECT, answer
from rota_ledger.ledger import PREEMPTIONS, PROPOSALS, RUN_END_SUBJECTS, RUNS, Ledger

NAME = "ledger"
MIGRATIONS = Path(__file__).parent / "migrations"
PREEMPTION_SUBJECTS = frozenset(
    EVENT_SUBJECTS[name] for name in ("PreemptionRequested", "PreemptionCompleted")
)


def build(service: RotaService | None = None, config: RotaConfig | None = None) -> RotaService:
    service = service or RotaService(NAME, migrations=MIGRATIONS)
    config = config or load_config(service.settings.config)
    max_bytes = service.settings.max_message_bytes

    def wake_relay() -> None:
        if service.relay is not None:
            service.relay.wake()

    ledger = Ledger(lambda: service.engine, service.outbox, config, service.clock,
                    max_bytes=max_bytes, on_commit=wake_relay)

    @service.js_batch_subscriber(EVENT_SUBJECTS["AllocationProposed"], stream=STREAM_EVT,
                                 durable=PROPOSALS, batch_size=128)
    async def allocation_proposed(batch: list[Msg]) -> None:
        """AllocationProposed → AllocationGranted or AllocationRejected, a batch per transaction."""
        await ledger.propose_batch([msg.data for msg in batch])

    @service.js_subscriber("rota.evt.run.>", stream=STREAM_EVT, durable=RUNS, batch_size=128)
    async def run_event(msg: Msg) -> None:
        """RunFinished / RunFailed / RunStopped → AllocationReleased + UsageRecorded."""
        # Started and checkpointed runs change nothing here; skip them before parsing.
        if msg.subject in RUN_END_SUBJECTS:
            await ledger.run_ended(msg.data)

    @service.js_subscriber("rota.evt.preemption.>", stream=STREAM_EVT, durable=PREEMPTIONS)
    async def preemption_event(msg: Msg) -> None:
        """PreemptionRequested holds the victims' GPUs; an aborted PreemptionCompleted frees them."""
        if msg.subject in PREEMPTION_SUBJECTS:
            await ledger.preemption(msg.data)

    @service.broker.subscriber(ALLOCATIONS_SUBJECT, queue="ledger-api")
    async def list_allocations(msg: NatsMessage) -> bytes:
        """Request/reply: allocations per run, active ones by default."""
        return await answer(service.engine, msg.body, max_bytes=max_bytes)

    return service
