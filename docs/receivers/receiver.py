"""A herald webhook receiver that verifies every request with the official Standard Webhooks
library (https://pypi.org/project/standardwebhooks/). Standard library HTTP server, no framework.

    pip install -r requirements.txt
    HERALD_SECRET=whsec_... PORT=9000 python3 receiver.py

HERALD_SECRET is the endpoint's secret, as herald answered when the endpoint was created.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

SECRET = os.environ.get("HERALD_SECRET") or sys.exit("set HERALD_SECRET to the endpoint's whsec_... secret")
PORT = int(os.environ.get("PORT") or 9000)  # 0 picks a free port

webhook = Webhook(SECRET)
# The HMAC key: the base64-decoded part after "whsec_" (used to answer the verification challenge).
KEY = base64.b64decode(SECRET.removeprefix("whsec_"))

# herald delivers at least once: the same event can arrive twice, always with the same webhook-id.
# Dedupe on it. This in-memory set is for the demo; in production use your database (a unique key).
seen = set()
seen_lock = threading.Lock()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))  # the raw bytes
        try:
            # Checks webhook-id, webhook-timestamp (within 5 min) and webhook-signature against
            # the raw body, then parses it as JSON. Never parse or re-serialize before this.
            event = webhook.verify(body, dict(self.headers))
        except (WebhookVerificationError, ValueError):
            return self.reply(401, b"invalid signature\n")

        # herald's verification challenge: answer the hex HMAC-SHA256 of the nonce.
        if isinstance(event, dict) and event.get("type") == "endpoint.verification":
            answer = hmac.new(KEY, event["nonce"].encode(), hashlib.sha256).hexdigest()
            return self.reply(200, json.dumps({"hmac": answer}).encode(), "application/json")

        msg_id = self.headers["webhook-id"]
        with seen_lock:
            duplicate = msg_id in seen
            seen.add(msg_id)
        if duplicate:
            print(f"duplicate {msg_id}", flush=True)
        else:
            print(f"verified {msg_id} {self.headers['herald-event-type']}", flush=True)
            # Queue the real work here and answer at once: herald waits at most 5 s for a 2xx.
        self.reply(200, b"ok\n")

    def reply(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # keep stdout/stderr for what matters
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Receiver)
print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
server.serve_forever()
