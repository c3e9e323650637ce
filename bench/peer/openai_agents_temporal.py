"""`openai-agents-temporal`: the same scripted task run with the OpenAI Agents SDK's Temporal
integration (`OpenAIAgentsPlugin`, package temporalio-openai-agents): an agent whose model
calls are the integration's model activity, against the OpenAI-compatible mock at --base-url
(Chat Completions, dummy API key), and whose one tool, `read_file`, is a Temporal activity
(`activity_as_tool`) that reads lines of notes.txt in --notes, like baton's `read_file`.
The worker runs in-process. See peer_common.py for the arguments and the output.

    python openai_agents_temporal.py --address 127.0.0.1:7233 --base-url http://127.0.0.1:PORT/v1 \
        --notes DIR --turns 20 --reps 3
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

# The SDK's tracing would export spans to OpenAI's platform; nothing here may leave the machine.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import peer_common
    from agents import Agent, Runner
    from agents.items import ToolCallItem

    # The integration's canonical module; temporalio.contrib.openai_agents re-exports it.
    from temporalio.openai_agents.workflow import activity_as_tool

VARIANT = "openai-agents-temporal"
PACKAGES = ["temporalio", "temporalio-openai-agents", "openai-agents", "openai"]
# The model name the agent asks for; the mock ignores it.
MODEL = "mock"

# Set in body(): where the tool reads, and how many tool calls the activity has served.
NOTES_DIR = Path(".")
TOOL_CALLS = 0


@activity.defn
async def read_file(path: str, offset: int, limit: int) -> str:
    """Read `limit` lines of the file at `path`, starting at line `offset` (1-based)."""
    global TOOL_CALLS
    TOOL_CALLS += 1
    lines = (NOTES_DIR / Path(path).name).read_text().splitlines()
    return "\n".join(lines[max(offset - 1, 0) : max(offset - 1, 0) + limit])


@dataclass
class AgentOutcome:
    output: str
    model_calls: int
    tool_calls: int


# Any exception fails the run (a wrong script must fail loudly, not retry its workflow task).
@workflow.defn(name="PeerAgentRun", failure_exception_types=[Exception])
class PeerAgentRun:
    @workflow.run
    async def run(self, turns: int) -> AgentOutcome:
        agent = Agent(
            name="reader",
            instructions="You read files with the read_file tool.",
            model=MODEL,
            tools=[
                activity_as_tool(read_file, start_to_close_timeout=timedelta(seconds=60))
            ],
        )
        result = await Runner.run(agent, input=peer_common.TASK, max_turns=turns)
        return AgentOutcome(
            output=str(result.final_output),
            model_calls=len(result.raw_responses),
            tool_calls=sum(isinstance(item, ToolCallItem) for item in result.new_items),
        )


async def body() -> None:
    global NOTES_DIR, TOOL_CALLS
    from agents import OpenAIProvider, set_tracing_disabled
    from openai import AsyncOpenAI
    from temporalio.client import Client
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import Worker

    args = peer_common.parse_args(__doc__ or VARIANT, model=True)
    NOTES_DIR = Path(args.notes)
    set_tracing_disabled(True)
    # Chat Completions (use_responses=False), no client-side retries (the integration's own
    # default: the activity's retry policy is the one that retries).
    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=args.base_url, api_key="dummy", max_retries=0),
        use_responses=False,
    )
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=60)),
        model_provider=provider,
    )
    client = await Client.connect(args.address, plugins=[plugin])
    queue = peer_common.unique("peer-openai-agents")
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[PeerAgentRun],
        activities=[read_file],
        sticky_queue_schedule_to_start_timeout=timedelta(
            seconds=peer_common.STICKY_QUEUE_TIMEOUT_S
        ),
    )

    async def run_one(workflow_id: str):
        global TOOL_CALLS
        TOOL_CALLS = 0
        outcome = await client.execute_workflow(
            PeerAgentRun.run,
            args.turns,
            id=workflow_id,
            task_queue=queue,
            task_timeout=timedelta(seconds=peer_common.WORKFLOW_TASK_TIMEOUT_S),
            execution_timeout=timedelta(seconds=peer_common.RUN_TIMEOUT_S),
        )
        served = TOOL_CALLS

        def check() -> None:
            want = (args.turns, args.turns - 1, args.turns - 1, peer_common.ANSWER)
            got = (outcome.model_calls, outcome.tool_calls, served, outcome.output)
            if got != want:
                raise RuntimeError(
                    f"{workflow_id}: (model calls, tool calls, tool activities run, answer) "
                    f"= {got}, expected {want}"
                )

        return check

    async with worker:
        await peer_common.drive(VARIANT, args, PACKAGES, run_one)


if __name__ == "__main__":
    peer_common.main(VARIANT, body)
