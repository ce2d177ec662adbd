"""`turncredit report RUN_DIR`: one self-contained HTML page for a training run.

Learning curves, the evaluation table and a trajectory browser, drawn in the browser by the
page's own script (page.js) from the run's data embedded as JSON. Nothing is fetched: no CDN,
no external file, so the page opens offline and can be mailed or archived as one file.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from turncredit.report.run_data import MAX_EPISODES, collect

__all__ = ["MAX_EPISODES", "render", "write_report"]


def write_report(run_dir: str | Path, out: str | Path | None = None, max_episodes: int = MAX_EPISODES) -> Path:
    """Write the report of `run_dir` to `out` (default RUN_DIR/report.html); returns the path."""
    data = collect(run_dir, max_episodes)
    path = Path(out) if out else Path(run_dir).expanduser() / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(data), encoding="utf-8")
    return path


def render(data: dict[str, Any]) -> str:
    """The page: page.html with page.js and the data filled in."""
    here = resources.files(__package__)
    parts = {
        "TITLE": html.escape(f"turncredit report: {data['run']['name']}"),
        "SCRIPT": (here / "page.js").read_text(encoding="utf-8"),
        "DATA": script_json(data),
    }
    # one pass, so text inside a filled-in part is never taken for a placeholder
    return re.sub(r"\{\{(TITLE|SCRIPT|DATA)\}\}", lambda m: parts[m.group(1)],
                  (here / "page.html").read_text(encoding="utf-8"))


def script_json(data: Any) -> str:
    """JSON safe inside <script>: every `<` escaped, so neither `</script>` nor `<!--` in model
    output can end or bend the script element."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
