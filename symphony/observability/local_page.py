"""A page for a file a browser will not open from a `file://` link: a ticket of the local board,
or a pull request of the local code host (both Markdown with YAML front matter).

The front matter shows as a table of its settings and the body as Markdown, rendered with raw
HTML off: the text is the tracker's and the agents', so none of it becomes markup or script.
"""

from __future__ import annotations

import html
from typing import Any

import yaml
from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_STYLE = (
    "body{font:14px/1.5 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}"
    "header{background:#1d2330;color:#fff;padding:.8rem 1.5rem}header a{color:#c0c6d4}"
    "main{max-width:60rem;padding:1rem 1.5rem}table{border-collapse:collapse;margin:.5rem 0}"
    "th,td{text-align:left;padding:.3rem .7rem;border-bottom:1px solid #e4e7ec;vertical-align:top}"
    "th{color:#667085;font-weight:600}pre{background:#f3f4f6;padding:.5rem;overflow:auto;"
    "white-space:pre-wrap;overflow-wrap:anywhere}code{background:#f3f4f6;padding:0 .2rem}"
    "article{background:#fff;border:1px solid #e4e7ec;border-radius:8px;padding:.2rem 1rem}"
    ".path{color:#667085;font-size:.85rem;overflow-wrap:anywhere}"
)


def local_file_page(kind: str, identifier: str, path: str, text: str, root: str = "/") -> bytes:
    """The HTML page of `text`, the file at `path` behind `identifier`'s `kind` link."""
    front, body = _split(text)
    what = "pull request" if kind == "pull" else "ticket"
    title = front.get("title") if isinstance(front.get("title"), str) else identifier
    rows = "".join(
        f"<tr><th>{html.escape(str(key))}</th><td>{_value(value)}</td></tr>"
        for key, value in front.items()
    )
    page = (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(identifier)}: {what}</title><style>{_STYLE}</style>"
        f'<header><a href="{html.escape(root)}">symphony</a> · {html.escape(identifier)}\'s '
        f"{what}</header><main><h1>{html.escape(str(title))}</h1>"
        f'<div class="path">{html.escape(path)}</div>'
        f"<table>{rows}</table><article>{_MARKDOWN.render(body)}</article></main></html>"
    )
    return page.encode()


def _split(text: str) -> tuple[dict[str, Any], str]:
    """The front matter (a map, or empty) and the body of a Markdown file."""
    if text.startswith("---\n"):
        head, _, body = text[4:].partition("\n---")
        try:
            loaded = yaml.safe_load(head)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded, body.partition("\n")[2]
    return {}, text


def _value(value: Any) -> str:
    if isinstance(value, dict | list):
        dumped = yaml.safe_dump(value, sort_keys=False, allow_unicode=True).strip()
        return f"<pre>{html.escape(dumped)}</pre>"
    return html.escape("" if value is None else str(value))
