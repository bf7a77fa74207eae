"""Tool confirmation and plugins in one process: a payment waits for a person's approval.

Run it: ``.venv/bin/python -m examples.confirm_payment``
"""

from __future__ import annotations

import asyncio
import logging

from adk_mesh import (
    Content,
    FunctionTool,
    LlmAgent,
    LoggingPlugin,
    Part,
    ReflectAndRetryToolPlugin,
    Runner,
    ToolContext,
)
from adk_mesh.models.offline import model_from_env
from adk_mesh.sessions.memory import InMemorySessionService


def send_payment(recipient: str, tool_context: ToolContext) -> dict[str, str]:
    """Send this month's payment to a recipient. Keywords: pay, payment, send."""
    answer = tool_context.tool_confirmation  # the person's answer, once given
    memo = answer.payload if answer is not None else None
    return {"sent_to": recipient, "memo": str(memo)}


root_agent = LlmAgent(
    name="payments",
    description="Sends payments. Keywords: pay, payment, send.",
    model=model_from_env(),
    instruction="Send payments with send_payment.",
    tools=[FunctionTool(send_payment, require_confirmation=True)],
)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sessions = InMemorySessionService()
    runner = Runner(
        agent=root_agent,
        app_name="payments",
        session_service=sessions,
        plugins=[LoggingPlugin(), ReflectAndRetryToolPlugin(max_retries=2)],
    )
    session = await sessions.create_session(app_name="payments", user_id="ada")

    async def turn(message: Content) -> None:
        async for event in runner.run(user_id="ada", session_id=session.id, new_message=message):
            for call in event.function_calls():
                print(f"{event.author} → {call.name}({call.args})")
                if call.name == "adk_request_confirmation":
                    request_ids.append(call.id or "")
            for response in event.function_responses():
                print(f"{event.author} ← {response.name}: {response.response}")
            if event.text:
                print(f"{event.author}: {event.text}")

    request_ids: list[str] = []
    await turn(Content.from_text("user", 'Pay "Bob"'))
    # The person approves, with a memo: the answer is a function response to the request.
    approval = Part.from_function_response(
        "adk_request_confirmation", {"confirmed": True, "payload": "rent"}, id=request_ids[-1]
    )
    await turn(Content(role="user", parts=[approval]))
    await runner.close()


if __name__ == "__main__":
    asyncio.run(main())
