"""Checks herald's OpenAPI document against a live herald (tests/command/openapi.rs runs this).

1. openapi-spec-validator validates GET /openapi.json as OpenAPI 3.1.
2. schemathesis runs every documented operation with the admin token, with the checks
   not_a_server_error, status_code_conformance, content_type_conformance and
   response_schema_conformance, bounded in time.

It starts herald itself (HERALD_BIN, HERALD_CONFIG) and is meant to run in a network namespace of
its own (`unshare -n`, loopback only): schemathesis creates endpoints with any URL, and herald
must not reach anything outside this machine while it tries them.

Exit code 0 when everything passes; the failures are printed otherwise.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename  # noqa: F401 (import check)

BIN = os.environ["HERALD_BIN"]
CONFIG = os.environ["HERALD_CONFIG"]
TOKEN = os.environ["HERALD_ADMIN_TOKEN"]
BUDGET = float(os.environ.get("SCHEMATHESIS_SECONDS", "150"))
REPORT_DIR = os.environ.get("SCHEMATHESIS_REPORT_DIR", "")
LOG = os.environ.get("HERALD_LOG", "herald-openapi.log")


def start_herald():
    """Starts herald with its log in a file (a pipe nobody reads would fill up and block it)."""
    log = open(LOG, "w")
    proc = subprocess.Popen(
        [BIN, "serve", "--config", CONFIG],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(LOG) as f:
            m = re.search(r"herald listening addr=(\S+)", f.read())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # polling interval while herald starts
    proc.kill()
    with open(LOG) as f:
        sys.exit("herald did not start:\n" + f.read())


def main():
    proc, addr = start_herald()
    base = f"http://{addr}"
    try:
        with urllib.request.urlopen(f"{base}/openapi.json", timeout=10) as r:
            doc = json.load(r)
        validate(doc)
        print(f"openapi-spec-validator: the document is valid OpenAPI {doc['openapi']}"
              f" ({len(doc['paths'])} paths, {len(doc.get('webhooks', {}))} webhooks)")
        cmd = [
            "schemathesis", "run", f"{base}/openapi.json",
            "--header", f"Authorization: Bearer {TOKEN}",
            "--checks", "not_a_server_error,status_code_conformance,"
                        "content_type_conformance,response_schema_conformance",
            "--max-examples", os.environ.get("SCHEMATHESIS_EXAMPLES", "25"),
            "--request-timeout", "15",
            "--generation-deterministic",
            "--no-color",
            # One streams the whole store, the other purges an account mid-run: each has tests
            # of its own (tests/command/backup.rs).
            "--exclude-operation-id", "Backup",
            "--exclude-operation-id", "AccountDelete",
        ]
        if REPORT_DIR:
            cmd += ["--report", "junit", "--report-dir", REPORT_DIR]
        print("running:", " ".join(c if "Bearer" not in c else "Authorization: Bearer ..." for c in cmd),
              flush=True)
        try:
            done = subprocess.run(cmd, timeout=BUDGET)
        except subprocess.TimeoutExpired:
            sys.exit(f"schemathesis did not finish within {BUDGET} s")
        if done.returncode != 0:
            sys.exit(f"schemathesis found failures (exit {done.returncode})")
        print("schemathesis: every documented operation answered as documented")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with open(LOG) as f:
            out = f.read()
        if "panicked" in out or os.environ.get("SHOW_HERALD_LOG"):
            print("\n".join(out.splitlines()[-80:]))
        if "panicked" in out:
            sys.exit("herald panicked")


if __name__ == "__main__":
    main()
