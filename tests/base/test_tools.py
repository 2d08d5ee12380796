"""What may stand on one line in a tool's argument or a state name."""

from __future__ import annotations

import sys
import unicodedata

from symphony.base.tools import is_inline


def test_one_line_means_no_control_surrogate_or_line_separator_of_any_unicode_version() -> None:
    breaking = {"Cc", "Cs", "Zl", "Zp"}
    wrong = [
        hex(code)
        for code in range(sys.maxunicode + 1)
        if is_inline(chr(code)) == (unicodedata.category(chr(code)) in breaking)
    ]
    assert wrong == []
    assert is_inline("In Review — ready") and not is_inline("Done\u2028Todo")
