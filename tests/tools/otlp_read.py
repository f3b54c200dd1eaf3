#!/usr/bin/env python3
"""Reads OTLP/HTTP export requests (protobuf) with the official OpenTelemetry definitions
(PyPI's opentelemetry-proto) and prints their spans as JSON, one object per span:
{"trace_id", "span_id", "parent_span_id", "name", "kind", "attributes", "events", "status",
"resource", "scope"} with ids in lowercase hex and attribute values as JSON values.

Usage: otlp_read.py BODY_FILE...  (tests/api/traces.rs compares this with its own reading)
"""
import json
import sys

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def main():
    spans = []
    for path in sys.argv[1:]:
        req = ExportTraceServiceRequest()
        with open(path, "rb") as f:
            body = f.read()
        try:
            req.ParseFromString(body)
        except DecodeError as e:
            print(f"{path}: not an ExportTraceServiceRequest: {e}", file=sys.stderr)
            return 1
        for rs in req.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append({
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": Span.SpanKind.Name(s.kind),
                        "attributes": attributes(s.attributes),
                        "events": [e.name for e in s.events],
                        "status": s.status.code,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "resource": resource,
                        "scope": ss.scope.name,
                    })
    json.dump(spans, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
