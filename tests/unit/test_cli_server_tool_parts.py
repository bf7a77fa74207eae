"""``adk-mesh run``'s printer shows a built-in tool the provider ran (a server tool call) on one
short line, and nothing for what it returned."""

from __future__ import annotations

import io

from adk_mesh.cli import print_events
from adk_mesh.types import Content, Event, LlmResponse, Part


def model_event(author: str, *parts: Part) -> Event:
    return Event(
        author=author, llm_response=LlmResponse(content=Content(role="model", parts=list(parts)))
    )


def printed(*events: Event) -> str:
    out = io.StringIO()
    print_events(events, out)
    return out.getvalue()


def test_a_google_search_prints_its_queries_and_its_results_nothing() -> None:
    search = Part.from_server_tool_call(
        "GOOGLE_SEARCH_WEB", {"queries": ["ørsta population", 'say "hi"\nthere']}, id="s-1"
    )
    results = Part.from_server_tool_response(
        "GOOGLE_SEARCH_WEB", {"results": [{"uri": "https://a.example"}]}, id="s-1"
    )
    assert printed(model_event("searcher", search, results, Part.from_text("About 10,000."))) == (
        '[searcher] [google search] "ørsta population" "say \\"hi\\"\\nthere"\n'
        "[searcher] About 10,000.\n"
    )


def test_other_server_tools_print_their_type_and_compact_args() -> None:
    events = [
        model_event(
            "a", Part.from_server_tool_call("URL_CONTEXT", {"urls": ["https://a.example"]})
        ),
        model_event("a", Part.from_server_tool_call("MAPS_LOOKUP", {"place": "Ørsta", "zoom": 3})),
        model_event("a", Part.from_server_tool_call("", {})),
        model_event("a", Part.from_server_tool_call("CODE_RUN", {"code": "x" * 500})),
        model_event("a", Part.from_server_tool_response("CODE_RUN", {"output": "y"})),
    ]
    lines = printed(*events).splitlines()
    assert lines[:3] == [
        '[a] [url fetch] "https://a.example"',
        '[a] [maps lookup] {"place": "Ørsta", "zoom": 3}',
        "[a] [server tool]",
    ]
    assert lines[3].startswith('[a] [code run] {"code": "xxx') and lines[3].endswith("…")
    assert len(lines[3]) < 200
    assert len(lines) == 4  # the response printed nothing
