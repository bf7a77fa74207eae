"""A stand-in for the trace backend of deploy/compose.yaml, for the deploy test only.

An OTLP/gRPC receiver on 0.0.0.0:4317 (TraceService/Export) that prints each span it receives
as one JSON line on stdout: ``{"trace_id", "span_id", "parent_span_id", "name", "service",
"attributes"}``. The test reads them with ``podman logs``. It runs in the adk-mesh image, whose
OpenTelemetry exporter packages carry the OTLP protobufs. Stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "service": resource.get("service.name", ""),
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                    }
                    sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


async def main() -> None:
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    server.add_insecure_port("0.0.0.0:4317")
    await server.start()
    print("otlp receiver: listening on 0.0.0.0:4317", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(number, stop.set)
    await stop.wait()
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main())
