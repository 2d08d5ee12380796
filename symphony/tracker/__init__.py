"""The boundary every tracker adapter implements: the contract, the tools built on its writes,
performing transitions, and webhooks.
"""
