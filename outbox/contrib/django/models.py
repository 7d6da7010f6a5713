"""No Django models: the outbox tables belong to outbox's SQL migrations.

This module exists so that Django sends this app the ``post_migrate`` signal, through
which ``manage.py migrate`` applies the SQL files of a newer outbox release
(:mod:`outbox.contrib.django.apps`).
"""
