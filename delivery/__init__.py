"""Delivery worker: claim, send, record; HTTP sender, retry policy, SSRF guard."""
