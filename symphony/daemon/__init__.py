"""The asyncio shell that performs what the core decides: the orchestrator's loop (which owns
the scheduling state), the performer of its effects, and what they delegate: start-up, reload,
tracker reads, where runs happen, file watches, one worker, and the attempt it runs.
"""
