"""Emit (private): validate and encode an event, route it, and write it on the caller's
handle in the caller's transaction. The public names are re-exported by :mod:`outbox`."""
