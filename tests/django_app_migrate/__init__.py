"""A real Django project for tests/integration/test_django_migrate.py: ``manage.py migrate``
with ``outbox.contrib.django`` in INSTALLED_APPS and an application with a model."""
