"""The ledger service: the only writer of GPU allocations. Thin wiring; the rules live in
`domain`, the transactions in `ledger`.

- `rota.evt.allocation.proposed` (durable `ledger-proposals`): grant or reject.
- `rota.evt.run.>` (durable `ledger-runs`): a run's end releases its GPUs.
- `rota.evt.preemption.>` (durable `ledger-preemptions`): hold GPUs for a plan's preemptor.
- `rota.sys.ledger.allocations`: the read API (the scheduler's rebuild, tests, the CLI).

With several replicas (`ROTA_REPLICAS`), these consumers follow leases instead: a flavor's
proposals are decided only by the holder of its lease (`rota_ledger.owners`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from rota.config import RotaConfig, load_config
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.service import RotaService, stop_tasks

from rota_ledger.api import ALLOCATIONS_SUBJECT, answer
from rota_ledger.ledger import PREEMPTIONS, PROPOSALS, RUN_END_SUBJECTS, RUNS, Ledger
from rota_ledger.owners import Handlers, Owners, consumers_by_key

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

    async def allocation_proposed(batch: list[Msg]) -> None:
        """AllocationProposed → AllocationGranted or AllocationRejected, a batch per transaction."""
        await ledger.propose_batch([msg.data for msg in batch])

    async def run_event(msg: Msg) -> None:
        """RunFinished / RunFailed / RunStopped → AllocationReleased + UsageRecorded."""
        # Started and checkpointed runs change nothing here; skip them before parsing.
        if msg.subject in RUN_END_SUBJECTS:
            await ledger.run_ended(msg.data)

    async def preemption_event(msg: Msg) -> None:
        """PreemptionRequested holds the victims' GPUs; an aborted PreemptionCompleted frees them."""
        if msg.subject in PREEMPTION_SUBJECTS:
            await ledger.preemption(msg.data)

    if service.partition.single:
        service.js_batch_subscriber(EVENT_SUBJECTS["AllocationProposed"], stream=STREAM_EVT,
                                    durable=PROPOSALS, batch_size=128)(allocation_proposed)
        service.js_subscriber("rota.evt.run.>", stream=STREAM_EVT, durable=RUNS,
                              batch_size=128)(run_event)
        service.js_subscriber("rota.evt.preemption.>", stream=STREAM_EVT,
                              durable=PREEMPTIONS)(preemption_event)
    else:
        own_leases(service, Owners(service, consumers_by_key(
            (f.name for f in config.cluster.flavors),
            Handlers(allocation_proposed, run_event, preemption_event)),
            service.settings.ledger_lease_ttl_s))

    @service.broker.subscriber(ALLOCATIONS_SUBJECT, queue="ledger-api")
    async def list_allocations(msg: NatsMessage) -> bytes:
        """Request/reply: allocations per run, active ones by default."""
        return await answer(service.engine, msg.body, max_bytes=max_bytes)

    return service


def own_leases(service: RotaService, owners: Owners) -> None:
    """Several replicas: each runs the consumers of the leases it holds (`rota_ledger.owners`)."""
    tasks: list[asyncio.Task[None]] = []

    @service.app.after_startup
    async def start_owning() -> None:
        tasks.append(asyncio.create_task(owners.run(), name="ledger-owners"))

    @service.app.on_shutdown
    async def stop_owning() -> None:
        await stop_tasks(tasks)
