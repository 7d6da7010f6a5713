"""Django migrations of ``outbox.contrib.django``: one, running the outbox SQL files
(see :mod:`outbox.contrib.django.apps` for how later outbox releases are applied)."""
