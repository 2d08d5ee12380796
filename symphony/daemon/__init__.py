"""The asyncio shell that performs what the core decides: the orchestrator's loop and the worker
that runs one attempt.
"""
