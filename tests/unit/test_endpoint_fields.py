"""An endpoint's fields are defined once: the JSON API's request bodies, the CLI's flags and
the portal's form take their limits and options from the library's definitions, so none of
them refuses what another takes.
"""

from __future__ import annotations

import re
from typing import Any

import click
import pytest
from pydantic import BaseModel

from outbox.admin import endpoint_oauth2, endpoints, filters
from outbox.admin.endpoint_options import EndpointOptions
from outbox.cli import cli, load_commands
from outbox.web import models
from outbox.web.pages import templates

# field -> the library's limit (characters)
LIMITS = {
    "url": endpoints.URL_MAX_LENGTH,
    "description": endpoints.DESCRIPTION_MAX_LENGTH,
    "oauth2_token_url": endpoint_oauth2.TOKEN_URL_MAX,
    "oauth2_client_id": endpoint_oauth2.CLIENT_ID_MAX,
    "oauth2_client_secret": endpoint_oauth2.CLIENT_SECRET_MAX,
    "oauth2_scope": endpoint_oauth2.SCOPE_MAX,
}


def _max_length(model: type[BaseModel], field: str) -> int | None:
    found = [m.max_length for m in model.model_fields[field].metadata
             if getattr(m, "max_length", None) is not None]
    return found[0] if found else None


@pytest.mark.parametrize("model", [models.PortalEndpointIn, models.EndpointIn,
                                   models.PortalEndpointPatch, models.EndpointPatch])
def test_the_api_bodies_take_the_librarys_limits(model: type[BaseModel]) -> None:
    for field, limit in LIMITS.items():
        assert _max_length(model, field) == limit, f"{model.__name__}.{field}"


@pytest.mark.parametrize("model", [models.EndpointIn, models.EndpointPatch])
def test_the_api_bodies_carry_every_delivery_option(model: type[BaseModel]) -> None:
    assert set(EndpointOptions.model_fields) <= set(model.model_fields)


@pytest.mark.parametrize("command", ["add", "update"])
def test_the_cli_has_a_flag_for_every_delivery_option(command: str) -> None:
    load_commands()
    group = cli.commands["endpoints"]
    assert isinstance(group, click.Group)
    params = {p.name for p in group.commands[command].params}
    assert set(EndpointOptions.model_fields) <= params, command


def _form(prefix: str, **context: Any) -> dict[str, int]:
    """The portal's endpoint form rendered: each named input's maxlength."""
    html = templates.env.get_template("_endpoint_form.html").render(
        prefix=prefix, form={}, offered=[], root="", **context)
    fields = re.findall(r'<(?:input|textarea)\b[^>]*?\bname="(\w+)"[^>]*?\bmaxlength="(\d+)"',
                        html)
    return {name: int(limit) for name, limit in fields}


@pytest.mark.parametrize("prefix", ["add", "edit"])
def test_the_portal_form_takes_the_librarys_limits(prefix: str) -> None:
    limits = _form(prefix)
    assert limits == {**LIMITS, "payload_filter": filters.FILTER_MAX_BYTES}
