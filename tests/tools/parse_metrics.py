"""Parses Prometheus text from stdin with the official client library's parser and prints the
samples as JSON lines: {"name", "labels", "value"}. A parse error exits non-zero."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type, "name": s.name,
                          "labels": s.labels, "value": s.value}))
