"""How the `kubernetes` backend talks to the API server: list-then-watch mirrors of a kind of
object, re-listed after a 410 Gone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch
from rota.k8s.api import read_json

log = logging.getLogger("rota.executor.kubernetes")

WATCH_TIMEOUT_S = 60


async def list_watch(mirror: dict[str, dict[str, Any]], on_listed: Callable[[], None],
                     on_change: Callable[[], None], list_fn: Any, *args: Any,
                     **kwargs: Any) -> None:
    """List, then watch from the list's resourceVersion; re-list after a 410 Gone. `mirror`
    holds the objects by name, as last listed or watched; `on_listed` is called after each
    list, `on_change` after each list and each watched change."""
    while True:
        listed = await read_json(await list_fn(*args, _preload_content=False, **kwargs))
        mirror.clear()
        mirror.update({o["metadata"]["name"]: o for o in listed["items"]})
        version = listed["metadata"]["resourceVersion"]
        on_listed()
        on_change()
        try:
            while True:
                async with Watch() as watch:
                    stream = watch.stream(list_fn, *args, resource_version=version,
                                          timeout_seconds=WATCH_TIMEOUT_S, **kwargs)
                    async for event in stream:
                        obj = event["raw_object"]
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] == "DELETED":
                            mirror.pop(obj["metadata"]["name"], None)
                        else:
                            mirror[obj["metadata"]["name"]] = obj
                        on_change()
        except ApiException as exc:
            if exc.status != 410:
                raise
            log.info("watch: resourceVersion %s expired (410 Gone); re-listing", version)
