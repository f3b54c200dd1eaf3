"""axe-core in the page under test: axe.min.js (MPL-2.0) from the axe-playwright-python package
(tests/browser/requirements.txt), evaluated through the browser's devtools protocol, outside
the page's CSP (the page itself never runs it). Nothing is fetched at run time."""

import sys
from pathlib import Path

_AXE = None


def axe_violations(page):
    """axe-core's violations on the page as it is now, every impact: [{id, impact, nodes}]."""
    global _AXE
    if _AXE is None:
        try:
            import axe_playwright_python
        except ImportError:
            sys.exit("axe-playwright-python is not installed: python3 -m pip install -r tests/browser/requirements.txt")
        _AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(_AXE)
    return page.evaluate(
        "async () => (await axe.run(document, { resultTypes: ['violations'] })).violations"
        ".map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')) }))")
