"""kill -9 of the coordinator with a saga open: its timers and state are rows, its inputs are
durable consumers, so the restarted process picks the saga up where it stood."""

from __future__ import annotations

from nats.aio.client import Client
from rota.contracts import Tier

from tests.integration.harness import ServiceProcess
from tests.integration.preemption.helpers import Saga, Victim


async def kill_hard(coordinator: ServiceProcess) -> None:
    assert coordinator.process is not None
    coordinator.process.kill()  # SIGKILL: no shutdown hook runs
    await coordinator.wait_exit()


async def test_the_deadline_still_fires_after_a_restart(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator, Victim(Tier.production))  # 6 s grace
    await saga.begin()
    assert (await saga.plan())["victims"][0]["state"] == "noticed"
    await kill_hard(coordinator)
    coordinator.start()
    await coordinator.wait_ready(nc)
    stop = await saga.stop()
    assert stop["data"]["forced"] is True
    await saga.run_stopped(forced=True, lost=50.0)
    done = await saga.completed()
    assert [(v["outcome"], v["lost_gpu_seconds"]) for v in done["victims"]] == [("forced", 50.0)]


async def test_an_ack_sent_while_the_coordinator_is_down_completes_the_saga(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator)  # 300 s grace: only the ack can stop this run
    await saga.begin()
    await kill_hard(coordinator)
    await saga.ack()  # waits in the durable consumer
    coordinator.start()
    await coordinator.wait_ready(nc)
    stop = await saga.stop()
    assert stop["data"]["forced"] is False
    await saga.run_stopped()
    done = await saga.completed()
    assert [v["outcome"] for v in done["victims"]] == ["acked"]
    assert len(await saga.stops()) == 1
