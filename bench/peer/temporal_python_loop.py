"""`python-bare-loop`: the Python analogue of bench/src/bare.rs's BareLoop, a plain Temporal
Python SDK workflow doing two no-op activities per turn (a stand-in for the model call and one
for the tool call, none in the last turn), on an in-process worker. See peer_common.py for the
arguments and the output.

    python temporal_python_loop.py --address 127.0.0.1:7233 --notes DIR --turns 20 --reps 3
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import peer_common

VARIANT = "python-bare-loop"
PACKAGES = ["temporalio"]


@activity.defn
async def bare_llm(turn: int) -> int:
    """Stands in for the model call."""
    return turn


@activity.defn
async def bare_tool(turn: int) -> int:
    """Stands in for the tool call."""
    return turn


# Any exception fails the run (a wrong script must fail loudly, not retry its workflow task).
@workflow.defn(name="PythonBareLoop", failure_exception_types=[Exception])
class PythonBareLoop:
    @workflow.run
    async def run(self, turns: int) -> int:
        options = {"start_to_close_timeout": timedelta(seconds=60)}
        for turn in range(1, turns + 1):
            await workflow.execute_activity(bare_llm, turn, **options)
            if turn < turns:
                await workflow.execute_activity(bare_tool, turn, **options)
        return turns


async def body() -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    args = peer_common.parse_args(__doc__ or VARIANT, model=False)
    client = await Client.connect(args.address)
    queue = peer_common.unique("peer-python-bare")
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[PythonBareLoop],
        activities=[bare_llm, bare_tool],
        sticky_queue_schedule_to_start_timeout=timedelta(
            seconds=peer_common.STICKY_QUEUE_TIMEOUT_S
        ),
    )

    async def run_one(workflow_id: str):
        done = await client.execute_workflow(
            PythonBareLoop.run,
            args.turns,
            id=workflow_id,
            task_queue=queue,
            task_timeout=timedelta(seconds=peer_common.WORKFLOW_TASK_TIMEOUT_S),
            execution_timeout=timedelta(seconds=peer_common.RUN_TIMEOUT_S),
        )

        def check() -> None:
            if done != args.turns:
                raise RuntimeError(f"{workflow_id} ran {done} turns, not {args.turns}")

        return check

    async with worker:
        await peer_common.drive(VARIANT, args, PACKAGES, run_one)


if __name__ == "__main__":
    peer_common.main(VARIANT, body)
