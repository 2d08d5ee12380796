"""Tracker adapters, one package per provider, found by the `tracker.kind` name."""
