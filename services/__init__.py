"""The reference mesh: a travel desk made of independent agent and tool services.

====================  ==============================================================  =========
module                what it serves                                                  port
====================  ==============================================================  =========
``services.concierge``  root agent ``concierge``: remembers preferences (``user:``),   50051
                        counts requests (``app:``), routes by transfer to the others;
                        the only service that persists (SQLite sessions, file artifacts)
``services.planner``    agent ``trip_planner``: delegates itineraries to the writer     50052
                        through AgentTool (state projection + write-back), checks
                        fares (long-running, with progress), saves and reads notes
``services.logistics``  agent ``logistics``: time zones, unit conversion, arithmetic    50053
``services.writer``     workflow agent ``itinerary_writer``: a LoopAgent, draft then    50054
                        review, until the reviewer calls exit_loop
``services.tools``      tool service: calculate, convert_units, save_note (artifacts),  50055
                        check_fares (long-running), and the MCP time server's
                        convert_time and get_current_time (an McpToolset, mesh.toml)
====================  ==============================================================  =========

Each runs with ``python -m services.<name> --port P`` (0 picks a free port) and equally with
``adk-mesh serve agent services.<name>:root_agent`` (``adk-mesh serve tools
services.tools:tools``). Services find each other through ``ADK_MESH_TARGET_<NAME>``
(``ADK_MESH_TARGET_TOOLS=127.0.0.1:50055``); ``adk-mesh up`` sets them from ``mesh.toml``.
Models come from :func:`adk_mesh.models.offline.model_from_env`: a provider when its key is
set, else the deterministic offline model.
"""
