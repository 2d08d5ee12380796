"""The Liquid engine prompts, branch names and stage templates render with.

python-liquid imports, whatever a template uses, babel's number and unit formatting (for its
locale-aware filters, `currency`, `unit` and the like, which symphony does not register) and
dateutil's parser (which the standard `date` filter uses for a free-form date). Loading them
is about a twentieth of the daemon's start-up; here they are loaded when a template first
uses them, and only then. babel's dates and pytz cannot wait: liquid's translation support
imports babel's message catalogue, which imports both.
"""

from __future__ import annotations

from symphony.base.imports import deferred_imports

LOADED_ON_USE = ("babel.numbers", "babel.units", "dateutil.parser")
"""What liquid imports that runs only when a template's filter first needs it."""

with deferred_imports(LOADED_ON_USE):
    from liquid import BoundTemplate, Environment, StrictUndefined
    from liquid.exceptions import LiquidError

__all__ = ["BoundTemplate", "Environment", "LiquidError", "StrictUndefined"]
