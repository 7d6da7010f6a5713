"""``outbox worker``: placeholder until the delivery worker lands."""
