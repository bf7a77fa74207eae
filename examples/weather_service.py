"""A complete agent service: an LlmAgent with one tool, served over gRPC.

Serve it with ``adk-mesh serve agent examples.weather_service:root_agent --port 50060``, then
ask it with ``adk-mesh run 127.0.0.1:50060 'What is the weather in "Oslo"?'``.
"""

from adk_mesh import LlmAgent
from adk_mesh.models.offline import model_from_env


def get_weather(city: str) -> dict[str, str | int]:
    """Current weather of a city. Keywords: weather, temperature, forecast."""
    return {"city": city, "temp_c": 12, "sky": "light rain"}  # call a real API here


root_agent = LlmAgent(
    name="weather",
    description="Answers weather questions. Keywords: weather, temperature, forecast.",
    model=model_from_env(),  # a provider key from the environment, else the offline model
    instruction="Answer weather questions with get_weather, in one sentence.",
    tools=[get_weather],
)
