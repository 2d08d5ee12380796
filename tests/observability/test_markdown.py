"""The review page's Markdown: a small subset rendered, and nothing a writer puts in the text
ever becoming markup or script."""

from __future__ import annotations

import html
import re

import pytest

from symphony.observability.markdown import render


def test_the_subset_renders() -> None:
    text = (
        "# Plan\n\nRead **the parser** and *its tests*, then `run()`.\n\n"
        "- first\n- second\n\n1. one\n2. two\n\n> quoted\n\n```\nx = 1 < 2\n```\n"
        "See [the docs](https://example.test/a?b=1&c=2)."
    )
    out = render(text)
    assert "<h3>Plan</h3>" in out
    assert "<strong>the parser</strong>" in out and "<em>its tests</em>" in out
    assert "<code>run()</code>" in out
    assert "<ul><li>first</li><li>second</li></ul>" in out
    assert "<ol><li>one</li><li>two</li></ol>" in out
    assert "<blockquote>quoted</blockquote>" in out
    assert "<pre><code>x = 1 &lt; 2</code></pre>" in out
    assert '<a href="https://example.test/a?b=1&amp;c=2" rel="noopener noreferrer nofollow"' in out


@pytest.mark.parametrize(
    "payload",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "<a href='javascript:alert(1)'>x</a>",
        "[click](javascript:alert(1))",
        "[click](JaVaScRiPt:alert(1))",
        "[click](data:text/html;base64,PHNjcmlwdD4=)",
        '[x](https://ok.test/" onmouseover="alert(1))',
        "**<svg onload=alert(1)>**",
        "`<script>`",
        "```\n<script>alert(1)</script>\n```",
        "- <iframe src=//evil.test>",
    ],
)
def test_untrusted_text_never_becomes_markup_or_script(payload: str) -> None:
    out = render(payload)
    tags = set(re.findall(r"<\s*([a-zA-Z0-9]+)", out))
    assert tags <= {"p", "strong", "em", "code", "pre", "ul", "ol", "li", "br", "a", "h3",
                    "blockquote"}  # fmt: skip
    assert "<script" not in out and "<img" not in out and "<svg" not in out
    assert "<iframe" not in out
    for href in re.findall(r'href="([^"]*)"', out):
        assert href.startswith(("http://", "https://"))
    assert not re.search(r"<[^>]*\son\w+=", out)  # no event handler inside any tag
    visible = html.unescape(re.sub(r"<[^>]+>", "", out))
    assert re.sub(r"[*`\n-]", "", payload).strip()[:12] in re.sub(r"[*`\n-]", "", visible)


def test_tags_in_the_text_stay_visible_as_text() -> None:
    assert render("<script>alert(1)</script>") == "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>"
    assert render('<img src=x onerror="alert(1)">') == (
        "<p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</p>"
    )


def test_empty_text_renders_nothing() -> None:
    assert render(None) == "" and render("") == ""
