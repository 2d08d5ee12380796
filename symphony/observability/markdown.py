"""A small, safe Markdown for the words a person reads on the review page (ticket
descriptions, plans, comments, the agent's summary): text written by people and agents the
daemon does not trust.

Safety by construction: the text is HTML-escaped first, whole, and only then is a small subset
turned into markup made here: paragraphs, `#` headings, `-`/`*`/`1.` lists, `>` quotes, fenced
code blocks, inline code, `**bold**`, `*italic*`, and `[text](url)` links whose address is
http or https (shown as text otherwise). No raw HTML passes through: `<script>` or
`<img onerror>` in the text stay visible as text. Links open in a new tab without the opener.
"""

from __future__ import annotations

import html
import re

MAX_CHARS = 200_000

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
_QUOTE = re.compile(r"^&gt;\s?(.*)$")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]{1,500})\]\(([^)\s]{1,2000})\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_SAFE_URL = re.compile(r"^https?://[^\s\"'<>`]+$", re.IGNORECASE)


def render(text: str | None) -> str:
    """`text` as HTML safe to put in a page; empty for none."""
    if not text:
        return ""
    lines = html.escape(text[:MAX_CHARS], quote=True).replace("\r\n", "\n").split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        index = _block(lines, index, out)
    return "\n".join(out)


def _block(lines: list[str], index: int, out: list[str]) -> int:
    """Render the block starting at `index`; the index after it."""
    line = lines[index]
    if _FENCE.match(line):
        end = index + 1
        while end < len(lines) and not _FENCE.match(lines[end]):
            end += 1
        out.append("<pre><code>" + "\n".join(lines[index + 1 : end]) + "</code></pre>")
        return end + 1
    heading = _HEADING.match(line)
    if heading:
        level = min(len(heading.group(1)) + 2, 6)  # under the page's own headings
        out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        return index + 1
    for pattern, tag in ((_BULLET, "ul"), (_NUMBERED, "ol"), (_QUOTE, "blockquote")):
        if pattern.match(line):
            items = []
            while index < len(lines) and (found := pattern.match(lines[index])):
                items.append(found.group(1))
                index += 1
            if tag == "blockquote":
                out.append(
                    "<blockquote>" + "<br>".join(_inline(i) for i in items) + "</blockquote>"
                )
            else:
                out.append(
                    f"<{tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + f"</{tag}>"
                )
            return index
    if not line.strip():
        return index + 1
    para = []
    while index < len(lines) and lines[index].strip() and not _starts_block(lines[index]):
        para.append(lines[index])
        index += 1
    out.append("<p>" + "<br>".join(_inline(p) for p in para) + "</p>")
    return index


def _starts_block(line: str) -> bool:
    return any(p.match(line) for p in (_FENCE, _HEADING, _BULLET, _NUMBERED, _QUOTE))


def _inline(text: str) -> str:
    """Code spans first (their insides stay as written), then links, bold and italic."""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):
        parts[i] = _ITALIC.sub(r"<em>\1</em>", _BOLD.sub(r"<strong>\1</strong>", _links(parts[i])))
    for i in range(1, len(parts), 2):
        parts[i] = f"<code>{parts[i]}</code>"
    return "".join(parts)


def _links(text: str) -> str:
    def link(found: re.Match[str]) -> str:
        label, url = found.group(1), html.unescape(found.group(2))
        if not _SAFE_URL.match(url):
            return found.group(0)  # shown as written, never a link
        href = html.escape(url, quote=True)
        return f'<a href="{href}" rel="noopener noreferrer nofollow" target="_blank">{label}</a>'

    return _LINK.sub(link, text)
