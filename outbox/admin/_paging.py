"""The largest page any list of :mod:`outbox.admin` returns (the API's ``limit`` bound)."""

MAX_PAGE = 500
