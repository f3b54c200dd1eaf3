"""What the browser scripts share: how Chromium is started, the default timeout, and the checks
that stop a script at its first failure, saying what was expected."""

import os
import sys
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 15_000


class CheckFailed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


def env(name, default=None):
    """An input of the script, from the environment; the script exits if it is missing."""
    v = os.environ.get(name, default)
    if v is None:
        sys.exit(f"{Path(sys.argv[0]).name}: set {name} (see the docstring)")
    return v
