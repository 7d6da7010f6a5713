"""Payload filters on the command line: the ``--filter`` / ``--no-filter`` options of
``outbox endpoints add`` and ``update``, and ``outbox endpoints test-filter`` (docs:
guides/filters.md). Every check is :mod:`outbox.admin.filters`'s."""

from __future__ import annotations

import json

import click

from outbox.admin import filters
from outbox.cli.endpoints import endpoints
from outbox.cli.filter_params import filter_text, read_json_arg
from outbox.cli.root import Context, Failed, pass_ctx


@endpoints.command("test-filter")
@click.argument("endpoint_id", metavar="ID")
@click.option("--payload", required=True, metavar="JSON",
              help="A sample event payload (JSON text, or @FILE).")
@click.option("--json", "as_json", is_flag=True, help="The answer as JSON.")
@pass_ctx
def try_filter(ctx: Context, endpoint_id: str, payload: str, as_json: bool) -> None:
    """Whether a sample payload matches the endpoint's filter, evaluated in the database
    by the same compiled filter emit routes with; and which top-level conditions hold.
    Reads only. Exit status 0 either way (read the answer); 1 on an error.

    \b
    Examples:
      outbox endpoints test-filter 0193... --payload '{"amount": 250, "currency": "EUR"}'
      outbox endpoints test-filter 0193... --payload @sample.json --json
    """
    text = read_json_arg(payload, "--payload")
    assert text is not None
    try:
        sample = json.loads(text)
    except ValueError as exc:
        raise Failed(f"--payload is not valid JSON: {exc}") from None
    with ctx.connect() as conn:
        result = filters.try_filter(conn, endpoint_id, sample, schema=ctx.schema)
    if as_json:
        click.echo(json.dumps({
            "matches": result.matches, "filter": result.filter,
            "conditions": [{"condition": c, "matches": m} for c, m in result.conditions]},
            indent=2, ensure_ascii=False))
        return
    click.echo(f"matches: {'yes' if result.matches else 'no'}")
    click.echo(f"filter:  {filter_text(result.filter)}")
    for condition, held in result.conditions:
        click.echo(f"  {'holds' if held else 'fails'}  {condition}")
