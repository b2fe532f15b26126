"""`rota-csv`: a generic trace format for `rota replay --format rota-csv`.

One header line, exactly::

    job_id,submit_s,duration_s,workers,gpus_per_worker,flavors,tier,team,resumable

then one row per job:

    job_id           unique, non-empty
    submit_s         seconds from the trace's start, >= 0 (rows may come in any order; the
                     replay takes them by submit time, ties in file order)
    duration_s       how long the job runs when nothing stops it, > 0
    workers          gang size, an integer >= 1; or `min-max` (e.g. `2-8`, 1 <= min < max): an
                     elastic gang (DECISIONS 72), whose duration_s is its run time at max,
                     the size the trace recorded; at n workers it runs duration_s x max / n
    gpus_per_worker  an integer >= 1, or for a job of one worker a GPU share: 0.25, 0.5 or 0.75
                     of one GPU (DECISIONS 66), which runs only on a flavor that allows shares
    flavors          the flavors it accepts, preferred first, separated by `|`; empty or `any`:
                     any flavor of the scenario, in the order its node pools list them
    tier             production, training or experiment
    team             the team, non-empty (the job's user is its team)
    resumable        true or false: whether it checkpoints (every 1,800 s of run time; it saves
                     on request in 60 s, and a resume costs 60 s) or loses everything if stopped

The declared runtime, which backfill and the ETA use, is not a column: as in the Philly rule
(`workload`), it is twice the duration rounded up to a whole hour. A row that breaks a rule is
refused with an error naming its line and field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from rota.contracts.common import Tier
from rota_policy.model.snapshot import QUARTERS

from rota_replay.workload import TraceJob

__all__ = ["HEADER", "TraceFormatError", "load_rota_csv", "write_rota_csv"]

HEADER = (
    "job_id", "submit_s", "duration_s", "workers", "gpus_per_worker", "flavors", "tier", "team", "resumable",
)  # fmt: skip
_ANY = ("", "any")


class TraceFormatError(ValueError):
    """A rota-csv file that breaks the format: the message names the line and the field."""


def _number(line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(f"line {line}, field {field}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceFormatError(f"line {line}, field {field}: {text!r} is not a finite number")
    return value


def _count(line: int, field: str, text: str) -> int:
    value = _number(line, field, text)
    if value != int(value):
        raise TraceFormatError(f"line {line}, field {field}: {text!r} is not a whole number")
    if value < 1:
        raise TraceFormatError(f"line {line}, field {field}: {text!r} must be at least 1")
    return int(value)


def _per_worker(line: int, text: str, workers: int) -> tuple[int, int]:
    """GPUs per worker and the share in quarters (0: whole GPUs)."""
    value = _number(line, "gpus_per_worker", text)
    if 0 < value < 1:
        quarters = value * QUARTERS
        if quarters != int(quarters):
            raise TraceFormatError(
                f"line {line}, field gpus_per_worker: {text!r} is not a share of 0.25, 0.5 or 0.75 of one GPU"
            )
        if workers != 1:
            raise TraceFormatError(
                f"line {line}, field gpus_per_worker: a share of one GPU ({text}) needs workers 1,"
                f" not {workers}"
            )
        return 1, int(quarters)
    return _count(line, "gpus_per_worker", text), 0


def _row(line: int, row: dict[str, str]) -> TraceJob:
    """The row as a job; its index `k` is set once all rows are sorted."""
    job_id = row["job_id"].strip()
    if not job_id:
        raise TraceFormatError(f"line {line}, field job_id: empty")
    submit = _number(line, "submit_s", row["submit_s"])
    if submit < 0:
        raise TraceFormatError(f"line {line}, field submit_s: {row['submit_s']!r} is negative")
    duration = _number(line, "duration_s", row["duration_s"])
    if duration <= 0:
        raise TraceFormatError(f"line {line}, field duration_s: {row['duration_s']!r} must be above 0")
    workers_min, workers = _workers(line, row["workers"])
    per_worker, share = _per_worker(line, row["gpus_per_worker"], workers)
    text = row["flavors"].strip()
    flavors: tuple[str, ...] = () if text.lower() in _ANY else tuple(f.strip() for f in text.split("|"))
    if any(not f for f in flavors):
        raise TraceFormatError(f"line {line}, field flavors: {text!r} has an empty name between '|'")
    if len(set(flavors)) != len(flavors):
        raise TraceFormatError(f"line {line}, field flavors: {text!r} names a flavor twice")
    try:
        tier = Tier(row["tier"].strip())
    except ValueError:
        raise TraceFormatError(
            f"line {line}, field tier: {row['tier']!r} is not one of production, training, experiment"
        ) from None
    team = row["team"].strip()
    if not team:
        raise TraceFormatError(f"line {line}, field team: empty")
    resumable = row["resumable"].strip().lower()
    if resumable not in ("true", "false"):
        raise TraceFormatError(f"line {line}, field resumable: {row['resumable']!r} is not true or false")
    return TraceJob(
        k=0,
        job_id=job_id,
        submit=submit,
        duration=duration,
        gpus=workers * per_worker,
        team=team,
        user=team,
        tier=tier,
        workers=workers,
        gpus_per_worker=per_worker,
        resumable=resumable == "true",
        declared_runtime_s=math.ceil(2 * duration / 3600.0) * 3600.0,
        flavors=flavors,
        share=share,
        workers_min=workers_min,
    )


def _workers(line: int, text: str) -> tuple[int, int]:
    """(min, max) of an elastic `min-max`, else (0, workers)."""
    if "-" not in text.strip():
        return 0, _count(line, "workers", text)
    low, _, high = text.strip().partition("-")
    least, most = _count(line, "workers", low), _count(line, "workers", high)
    if least >= most:
        raise TraceFormatError(f"line {line}, field workers: {text!r}: min must be below max")
    return least, most


def load_rota_csv(path: Path) -> list[TraceJob]:
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != HEADER:
            found = ",".join(header or [])
            raise TraceFormatError(f"line 1: the header must be {','.join(HEADER)}; found {found}")
        rows = []
        seen: dict[str, int] = {}
        for line, values in enumerate(reader, start=2):
            if not values or (len(values) == 1 and not values[0].strip()):
                continue
            if len(values) != len(HEADER):
                raise TraceFormatError(f"line {line}: {len(values)} fields; the header has {len(HEADER)}")
            job = _row(line, dict(zip(HEADER, values, strict=True)))
            if job.job_id in seen:
                first = seen[job.job_id]
                raise TraceFormatError(f"line {line}, field job_id: {job.job_id!r} is also on line {first}")
            seen[job.job_id] = line
            rows.append(job)
    rows.sort(key=lambda j: j.submit)  # stable: ties keep file order
    return [replace(job, k=k) for k, job in enumerate(rows)]


def write_rota_csv(jobs: Iterable[TraceJob], path: Path) -> int:
    """Write jobs in the format (floats as Python's shortest round-trip form, so that a trace
    read back replays identically); returns how many."""
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(HEADER)
        for j in jobs:
            per_worker = repr(j.share / QUARTERS) if j.share else j.gpus_per_worker
            workers = f"{j.workers_min}-{j.workers}" if j.elastic else j.workers
            out.writerow((j.job_id, repr(j.submit), repr(j.duration), workers, per_worker,
                          "|".join(j.flavors), j.tier.value, j.team, "true" if j.resumable else "false"))
            count += 1
    return count
