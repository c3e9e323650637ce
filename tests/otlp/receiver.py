"""A small OTLP/gRPC trace receiver for baton's tests (suite::tracing).

Serves the OpenTelemetry collector's TraceService on 127.0.0.1 (a free port, printed as
`listening on PORT` on stdout) with the official `opentelemetry-proto` messages and `grpcio`,
and appends every span it receives to FILE as one JSON line: trace and span ids in hex, the
parent span id, the name, start and end times in nanoseconds, the status code and the
attributes as plain values. Runs until it is killed.

    python3 receiver.py FILE
"""

import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def Export(self, request, context):
        lines = []
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(
                        json.dumps(
                            {
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                                "name": span.name,
                                "kind": span.kind,
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "status": span.status.code,
                                "attributes": {a.key: value(a.value) for a in span.attributes},
                                "resource": resource,
                            }
                        )
                    )
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(sys.argv[1]), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
