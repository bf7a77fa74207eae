"""The HTTP front door of an adk-mesh: google-adk's ``api_server`` REST and SSE API over the
mesh's gRPC contract, with OpenAPI 3.1, problem+json errors and the mesh's authenticators.

::

    adk-mesh gateway --port 8000 --app travel=127.0.0.1:50051

Programs build the ASGI app with :func:`create_app` and serve it with any ASGI server::

    app = create_app(GatewaySettings(apps={"travel": "127.0.0.1:50051"}))

The gateway reaches agents only through the gRPC contract (``adk_mesh.v1`` stubs and
``adk_mesh.codec``), never by importing agent code.
"""

from __future__ import annotations

from gateway._app import create_app
from gateway._settings import GatewaySettings

__all__ = ["GatewaySettings", "create_app"]
