// A herald webhook receiver that verifies every request with the official Standard Webhooks
// library (https://www.npmjs.com/package/standardwebhooks). node:http, no framework.
//
//     npm ci
//     HERALD_SECRET=whsec_... PORT=9000 node receiver.mjs
//
// HERALD_SECRET is the endpoint's secret, as herald answered when the endpoint was created.

import { createHmac } from "node:crypto";
import http from "node:http";
import { Webhook } from "standardwebhooks";

const secret = process.env.HERALD_SECRET;
if (!secret) {
  console.error("set HERALD_SECRET to the endpoint's whsec_... secret");
  process.exit(1);
}
const port = Number(process.env.PORT || 9000); // 0 picks a free port

const webhook = new Webhook(secret);
// The HMAC key: the base64-decoded part after "whsec_" (used to answer the verification challenge).
const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");

// herald delivers at least once: the same event can arrive twice, always with the same webhook-id.
// Dedupe on it. This in-memory set is for the demo; in production use your database (a unique key).
const seen = new Set();

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks); // the raw bytes
    let event;
    try {
      // Checks webhook-id, webhook-timestamp (within 5 min) and webhook-signature against the
      // raw body, then parses it as JSON. req.headers is a plain object with lowercase names.
      event = webhook.verify(body, req.headers);
    } catch {
      res.writeHead(401, { "content-type": "text/plain" }).end("invalid signature\n");
      return;
    }

    // herald's verification challenge: answer the hex HMAC-SHA256 of the nonce.
    if (event?.type === "endpoint.verification") {
      const hmac = createHmac("sha256", key).update(event.nonce).digest("hex");
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ hmac }));
      return;
    }

    const id = req.headers["webhook-id"];
    if (seen.has(id)) {
      console.log(`duplicate ${id}`);
    } else {
      seen.add(id);
      console.log(`verified ${id} ${req.headers["herald-event-type"]}`);
      // Queue the real work here and answer at once: herald waits at most 5 s for a 2xx.
    }
    res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}/`);
});
