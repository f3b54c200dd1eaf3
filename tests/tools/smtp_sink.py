#!/usr/bin/python3
"""A real SMTP server for herald's failure alert tests (tests/common/smtp.rs).

Debian's aiosmtpd (package python3-aiosmtpd, run by Debian's /usr/bin/python3) on 127.0.0.1 and
a free port, which it prints on its first line of output. Each message it accepts is written to
--dir as NNNNN.json ({"mail_from", "rcpt_tos", "data"}), under a temporary name renamed when
whole, so a reader never sees half a message.

--mode starttls (the default) answers in plain text and requires STARTTLS before any mail
(a client that does not upgrade gets nothing through); --mode smtps speaks TLS from the first
byte. Both use --cert/--key (PEM; the tests' own CA signs them). --user/--password require
that login (over TLS). --refuse answers 554 to every message.
"""

import argparse
import asyncio
import itertools
import json
import os
import ssl
import sys
import warnings

from aiosmtpd.smtp import SMTP, AuthResult

# aiosmtpd 1.4 warns about its own use of Session.login_data on every login.
warnings.filterwarnings("ignore", category=DeprecationWarning)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--mode", choices=["starttls", "smtps"], default="starttls")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--refuse", action="store_true")
    args = p.parse_args()

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    counter = itertools.count(1)

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            if args.refuse:
                return "554 5.7.1 refused by the test server"
            n = next(counter)
            record = {
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "data": envelope.original_content.decode("utf-8", "replace"),
            }
            tmp = os.path.join(args.dir, f".{n:05}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.rename(tmp, os.path.join(args.dir, f"{n:05}.json"))
            return "250 OK"

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = (
            auth_data.login.decode() == args.user
            and auth_data.password.decode() == args.password
        )
        return AuthResult(success=ok)

    def factory():
        kwargs = {}
        if args.user:
            kwargs.update(authenticator=authenticate, auth_required=True)
        if args.mode == "starttls":
            kwargs.update(tls_context=ctx, require_starttls=True)
        else:
            # TLS from the first byte: AUTH over it is fine.
            kwargs.update(auth_require_tls=False)
        return SMTP(Handler(), hostname="localhost", **kwargs)

    async def serve():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            factory,
            host="127.0.0.1",
            port=0,
            ssl=ctx if args.mode == "smtps" else None,
        )
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
