"""Pieces every HTTP tracker adapter shares: the HTTP client with retries and rate limits,
GraphQL calls, provider-config and secret helpers, and value normalization.

Not an adapter itself: the leading underscore keeps it out of `tracker.kind` discovery.
"""
