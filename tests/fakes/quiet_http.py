"""The HTTP server the fakes serve from (a model provider, a webhook, an OTLP collector).

Its handler threads never hold the test process, and a client that went away in the middle of
an answer (an agent killed while its response streams, a test that ended first) is not an
error: the default prints a traceback from the handler's thread, and on CPython 3.11 printing
one parses source text (the carets under the failing expression) with a recursion counter all
threads share, so a test parsing Python at that moment failed with `SystemError: AST
constructor recursion depth mismatch`. Any other error is printed as before. It imports only
the standard library: `fake_anthropic.py` also runs as a script beside it.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away mid-answer: nothing to report
        super().handle_error(request, client_address)
