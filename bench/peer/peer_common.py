"""What the two Python peers of `baton-bench peer` share: arguments, the run protocol, output.

A peer script connects to the dev server at --address, runs its own worker in-process on a
unique task queue, runs one untimed warm-up run of --turns turns, then the timed runs, and
prints ONE JSON line on stdout at the end:

    {"variant": ..., "turns": N, "wall_ms": [per rep], "versions": {...}}

A rep's wall time runs from the client's start request to the moment it has the result (as
in the Rust variants). Every run is checked (model calls, tool calls, final answer) after its
clock stops; a wrong count fails the script.

With --stdin-reps, the timed runs are driven by the caller, so that it can interleave them
with other variants: after the warm-up the script prints {"event": "ready"}; each line read
from stdin starts one rep, answered by {"event": "rep", "wall_ms": ...}; at end of input it
prints the final line. On any error it prints {"variant": ..., "error": "..."} on stdout (the
traceback goes to stderr) and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import platform
import sys
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable

# The model's final answer (bench/src/scenario.rs `ANSWER`).
ANSWER = "All notes read."
# The task (bench/src/scenario.rs `spec`).
TASK = "Read notes.txt one line at a time, then say you are done."
# Same as baton's runs (`baton submit`) and the Rust BareLoop.
WORKFLOW_TASK_TIMEOUT_S = 5
# Same as baton-worker's default sticky_queue_schedule_to_start_timeout.
STICKY_QUEUE_TIMEOUT_S = 3
# A run that takes longer than this has gone wrong.
RUN_TIMEOUT_S = 600


def parse_args(description: str, model: bool) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", required=True, help="Temporal frontend, host:port")
    if model:
        parser.add_argument(
            "--base-url", required=True, help="OpenAI-compatible base URL (Chat Completions)"
        )
        parser.add_argument("--notes", required=True, help="directory holding notes.txt")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--stdin-reps", action="store_true", help="one timed rep per line read from stdin"
    )
    args = parser.parse_args()
    if args.turns < 1 or args.reps < 0:
        parser.error("--turns must be at least 1 and --reps at least 0")
    return args


def versions(packages: list[str]) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)


async def drive(
    variant: str,
    args: argparse.Namespace,
    packages: list[str],
    run_one: Callable[[str], Awaitable[Callable[[], None]]],
) -> None:
    """Warm-up, then the timed reps. `run_one(workflow_id)` runs one workflow to its result
    and returns a check to call once the clock has stopped (it raises if the run was wrong)."""
    tag = unique(f"peer-{variant}")
    check = await run_one(f"{tag}-warmup")
    check()
    walls: list[float] = []

    async def timed(rep: int) -> float:
        started = time.perf_counter()
        check = await run_one(f"{tag}-{rep}")
        wall_ms = (time.perf_counter() - started) * 1000.0
        check()
        walls.append(wall_ms)
        return wall_ms

    if args.stdin_reps:
        emit({"event": "ready"})
        rep = 0
        while await asyncio.to_thread(sys.stdin.readline):
            rep += 1
            emit({"event": "rep", "wall_ms": await timed(rep)})
    else:
        for rep in range(1, args.reps + 1):
            await timed(rep)
    emit(
        {
            "variant": variant,
            "turns": args.turns,
            "wall_ms": walls,
            "versions": versions(packages),
        }
    )


def describe(error: BaseException) -> str:
    """The error and its causes, outermost first (a failed workflow's reason is its cause)."""
    parts = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 5:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__
    return " <- ".join(parts)


def main(variant: str, body: Callable[[], Awaitable[None]]) -> None:
    """Runs `body`; on error prints the error line and exits 1."""
    try:
        asyncio.run(body())
    except BaseException as e:  # noqa: BLE001 - report anything, incl. import errors in body
        traceback.print_exc()
        emit({"variant": variant, "error": describe(e)})
        sys.exit(1)
