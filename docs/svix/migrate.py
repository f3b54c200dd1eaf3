#!/usr/bin/env python3
"""Copies applications and endpoints, with their signing secrets, from Svix into herald
(docs/svix.md, "Moving from Svix"), with the official Svix Python library on both sides.

    pip install svix==2.9.1
    SOURCE_URL=https://api.eu.svix.com SOURCE_TOKEN=sk_... \\
    TARGET_URL=https://herald.example.com TARGET_TOKEN=<herald admin token> \\
        python3 docs/svix/migrate.py

Each application keeps its uid (or gets its Svix id as uid); each endpoint keeps its uid (or its
Svix id), URL, description, event types, channels, metadata, rate, disabled flag, the headers
Svix shows, and its current signing secret, so receivers verify herald's requests as they did
Svix's. Run it again and what exists is updated in place: nothing is doubled. Sensitive headers
(Svix does not show their values) are named at the end, to set by hand.
"""

import os
import sys

from svix.api import (
    ApplicationIn,
    ApplicationListOptions,
    EndpointHeadersIn,
    EndpointIn,
    EndpointListOptions,
    EndpointSecretRotateIn,
    EndpointUpsertIn,
    Svix,
    SvixOptions,
)
from svix.exceptions import HttpError


def client(prefix):
    url, token = os.environ.get(f"{prefix}_URL"), os.environ.get(f"{prefix}_TOKEN")
    if not url or not token:
        sys.exit(f"set {prefix}_URL and {prefix}_TOKEN")
    return Svix(token, SvixOptions(server_url=url))


def every(list_page):
    """Every item of a paged list, following `iterator` until `done`."""
    iterator = None
    while True:
        page = list_page(iterator)
        yield from page.data
        if page.done or not page.iterator:
            return
        iterator = page.iterator


def main():
    source, target = client("SOURCE"), client("TARGET")
    sensitive = []
    apps = endpoints = 0
    for app in every(lambda it: source.application.list(ApplicationListOptions(limit=100, iterator=it))):
        uid = app.uid or app.id
        target.application.upsert(
            uid,
            ApplicationIn(name=app.name, uid=uid, metadata=app.metadata, throttle_rate=app.throttle_rate),
        )
        apps += 1
        for ep in every(lambda it: source.endpoint.list(app.id, EndpointListOptions(limit=100, iterator=it))):
            ep_uid = ep.uid or ep.id
            secret = source.endpoint.get_secret(app.id, ep.id).key
            headers = source.endpoint.get_headers(app.id, ep.id)
            fields = dict(
                url=ep.url,
                description=ep.description,
                throttle_rate=ep.throttle_rate,
                uid=ep_uid,
                disabled=bool(ep.disabled),
                event_types=ep.event_types,
                channels=ep.channels,
                metadata=ep.metadata,
            )
            try:
                target.endpoint.get(uid, ep_uid)
            except HttpError as e:
                if e.status_code != 404:
                    raise
                target.endpoint.create(uid, EndpointIn(secret=secret, headers=headers.headers, **fields))
            else:
                target.endpoint.upsert(uid, ep_uid, EndpointUpsertIn(**fields))
                target.endpoint.set_headers(uid, ep_uid, EndpointHeadersIn(headers=headers.headers))
                if target.endpoint.get_secret(uid, ep_uid).key != secret:
                    target.endpoint.rotate_secret(
                        uid, ep_uid, EndpointSecretRotateIn(key=secret, grace_period_seconds=0)
                    )
            endpoints += 1
            sensitive.extend(f"{uid}/{ep_uid}: {name}" for name in headers.sensitive)
    print(f"copied {apps} applications and {endpoints} endpoints")
    if sensitive:
        print("sensitive headers to set by hand (Svix does not show their values):")
        for line in sensitive:
            print(f"  {line}")


if __name__ == "__main__":
    main()
