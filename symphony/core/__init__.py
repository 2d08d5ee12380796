"""Pure decisions as functions of state and events: no asyncio, no I/O, no subprocess. The
daemon performs the effects they return.
"""
