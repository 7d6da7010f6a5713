"""Framework helpers for the receiving side (:mod:`outbox.inbox`), one module per framework.

``outbox.contrib.fastapi`` (FastAPI/Starlette), ``outbox.contrib.django`` and
``outbox.contrib.flask`` each import their framework; nothing in the rest of outbox imports
them (an import-linter contract), so ``import outbox`` never needs any framework installed.
Each answers 400 to a webhook that fails verification or is not JSON (nothing written), 200
to a duplicate without calling the handler, and otherwise leaves the answer to the handler,
whose writes commit in one transaction with the webhook-id, before the answer is sent.
"""
