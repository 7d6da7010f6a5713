"""Reference pages generated from the code at every docs build (mkdocs-gen-files).

Each generated page has a source under ``docs/`` (its title and introduction) holding
``<!-- generated: NAME -->`` where the generated part goes.

- ``reference/settings.md``: every field of the pydantic settings models
  (:class:`outbox.settings.Settings`, the worker's and the web interface's), with its
  environment variable, type, default and bounds read from the model. The meaning of a
  field is its ``Field(description=...)`` when it has one, else the line in
  :data:`MEANINGS` below. A field with neither, or a line naming no field, fails the build,
  so the page cannot fall behind the models.
- ``reference/http-api.md`` and ``reference/openapi.json``: the OpenAPI document of
  :func:`outbox.web.create_app`, and every operation in it as a table.

The CLI reference (``reference/cli.md``) is rendered by mkdocs-click from the click parser;
:func:`outbox.cli.load_commands` below registers every command on it first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import mkdocs_gen_files
from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from outbox.admin.portal import WebSettings
from outbox.cli import cli, load_commands
from outbox.delivery.settings import WorkerSettings
from outbox.settings import Settings
from outbox.web import create_app

CONTENT = Path(__file__).resolve().parent.parent  # docs/: the pages

load_commands()  # the CLI's subcommands register themselves on import (for mkdocs-click)

MEANINGS: dict[str, str] = {
    # outbox.settings.Settings: the app (emit), the CLI, the worker and the web interface
    "database_url": "Where the outbox tables live (`DATABASE_URL` is read when this is unset).",
    "schema_name": "Schema of the outbox tables: a lowercase SQL identifier.",
    "validate_payloads": ("`OUTBOX_VALIDATE`: a payload whose type has a schema in the event "
                          "catalog is checked at emit: `strict` refuses a mismatch "
                          "(`InvalidEvent`), `warn` logs it, `off` skips the check."),
    "require_registered_types": "Refuse at emit an event whose type is not in the catalog.",
    "catalog_refresh_seconds": ("How long a process uses its copy of the catalog before it "
                                "reads the catalog's version row again (0: every emit)."),
    "public_url": ("The console's and portal's public address: portal links are built from it "
                   "(or from `base_url`), never from a request's Host header."),
    "max_payload_bytes": "Largest serialised payload `emit` accepts "
                         "(over it: `InvalidEvent`, nothing written).",
    "prepare_threshold": "Runs of a statement on a connection before it is prepared: psycopg "
                         "3's own prepared statements on outbox's connections (worker, CLI), "
                         "SQL `PREPARE` for emit on psycopg2, Django and SQLAlchemy on psycopg2 "
                         "([details](../guides/stacks.md#prepared-statements)); `none` "
                         "disables both (needed behind PgBouncer in transaction mode).",
    "allow_networks": "CIDRs the SSRF guard lets through, e.g. `127.0.0.0/8,10.1.0.0/16`: "
                      "checked when an endpoint is registered and by the worker before every "
                      "connection.",
    "secret_key": "Fernet key(s), comma-separated, the first encrypting: signing secrets "
                  "at rest ([Security model](../concepts/security.md)).",
    "wakeup": "How idle workers learn of new work: `notify` (woken by the emitting commit) "
              "or `poll`. Set it the same for the app and the workers "
              "([Wake-up](../guides/workers.md#wake-up)).",
    "json_default": "`module:function` encoding your own payload types "
                    "([Payload types](../guides/emitting.md#payload-types)); imported on first "
                    "use, `ConfigurationError` if it cannot be.",
    # outbox.delivery.settings.WorkerSettings: `outbox worker`
    "lease_seconds": "How long a claim hides a delivery from other workers.",
    "http_timeout_seconds": "Total time per request; must be below the lease (checked at start).",
    "database_stall_seconds": ("/readyz answers 503 while one database call has run longer than"
                               " this (a commit waiting for a missing synchronous standby, a"
                               " lock, a hung network path)."),
    "connect_timeout_seconds": "TCP/TLS connect timeout.",
    "retry_base_seconds": "Backoff scale (per endpoint: `--retry-base-seconds`).",
    "retry_cap_seconds": "Longest wait between attempts (per endpoint: `--retry-cap-seconds`).",
    "retry_after_max_seconds": "Clamp on a receiver's `Retry-After`.",
    "max_attempts": "Attempts before a delivery is `dead` (per endpoint: `--max-attempts`).",
    "poll_interval_seconds": "Idle poll interval; unset: 5 s with `notify` (only a fallback "
                             "for a lost wake-up), 0.05 s with `poll`.",
    "concurrency": "Requests in flight per process (`outbox worker --concurrency`).",
    "batch_size": "Most deliveries claimed per statement.",
    "shutdown_grace_seconds": "Time in-flight requests get after SIGTERM to finish and be "
                              "recorded; what is still running is left to its lease.",
    "response_body_cap": "Response bytes kept in the attempt log (read as a stream, cut there).",
    "user_agent": "The `User-Agent` header of every delivery.",
    "endpoint_max_in_flight": "Requests in flight to one endpoint per process; `0`: a quarter "
                              "of the concurrency. As many more wait in the process, the rest "
                              "go back to the queue.",
    "breaker_threshold": "Consecutive failures that open an endpoint's circuit breaker.",
    "failing_threshold": "Consecutive failed attempts (across all workers) that make an "
                         "endpoint `failing`: `outbox.endpoint.failing` once, "
                         "`outbox.endpoint.recovered` at its next delivered attempt.",
    "breaker_cooldown_seconds": "How long an open breaker hides the endpoint's deliveries "
                                "before one probe.",
    "retention_seconds": "Finished deliveries older than this are pruned by the workers "
                         "(`0`: never).",
    "prune_interval_seconds": "How often one worker prunes (an advisory lock picks one).",
    "dead_retention_seconds": "Dead deliveries are kept this long for replay (`outbox dead`,"
    " `outbox replay`): a partition holding a younger dead delivery is not dropped. 0: kept"
    " until replayed, skipped or pruned with `outbox prune --dead-too`.",
    "partition_seconds": "The width of one partition of the delivery history: the workers"
    " open a new partition of deliveries and attempt logs this often and drop those past"
    " retention that hold nothing that must survive (Partitioned history). `0` (the"
    " default): a third of `OUTBOX_RETENTION_SECONDS`, at least an hour (a day without"
    " retention), so about five partitions are kept: each one kept costs every claim a"
    " little planning. Else at least 10.",
    "prune_batch_size": "Rows the workers' pruning deletes per transaction.",
    "metrics_port": "`/metrics`, `/healthz`, `/readyz` (`--metrics-port`; `0` disables; not "
                    "served with `--drain`). The default port already taken: one warning "
                    "line, and this worker runs without them; a port you set that is taken "
                    "is an error.",
    "metrics_host": "Address the metrics and health server listens on.",
    "log_format": "`json` (one object per line) or `text`.",
    "backlog_interval_seconds": "How often a worker reads the backlog gauges.",
    "worker_id": "This worker's name in the attempt log (`by`); default `HOSTNAME:PID`.",
    # outbox.admin.portal.WebSettings: `outbox serve` and outbox.web.create_app
    "admin_token": "The operator's token (API `Bearer`, console sign-in); at least 32 "
                   "characters off loopback. Unset: nobody signs in as operator "
                   "(`outbox serve` then prints a one-off token and listens on loopback).",
    "web_secret": "Signs sessions and portal links (default: derived from the admin token); "
                  "set it so that links outlive a token change.",
    "portal_allow_networks": "Private networks a customer may register endpoints in through "
                             "the portal (the operator's `OUTBOX_ALLOW_NETWORKS` never applies "
                             "there).",
    "session_seconds": "Lifetime of an operator's console session.",
    "portal_session_seconds": "Lifetime of a customer's portal session.",
    "max_body_bytes": "Largest request body the web app accepts (over it: 413).",
}

MODELS: list[tuple[str, type[BaseSettings], str]] = [
    ("Core: the app, the CLI and every process", Settings,
     "Read by `emit` in your application, by every `outbox` command, the worker and the web "
     "interface."),
    ("Worker: `outbox worker`", WorkerSettings,
     "Read by the worker at start: an invalid value stops it with one line, "
     "`error: invalid worker setting ...`."),
    ("Web: `outbox serve` and `outbox.web.create_app`", WebSettings,
     "Read by the HTTP API, the console and the portal."),
]


def env_name(name: str, field: FieldInfo) -> str:
    """The environment variable a field is read from."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        first = alias.choices[0]
        if isinstance(first, str) and first.isupper():
            return first
    return f"OUTBOX_{name.upper()}"


def default_text(name: str, field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "computed"
    value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if value == "":
        return "empty"
    return f"`{value}`"


def bounds_text(field: FieldInfo) -> str:
    marks = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    parts = [f"{sign} {getattr(m, key)}" for m in field.metadata
             for key, sign in marks.items() if getattr(m, key, None) is not None]
    return ", ".join(parts)


def type_text(field: FieldInfo) -> str:
    annotation = field.annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("pydantic.types.", "")


def own_fields(model: type[BaseSettings]) -> Iterator[tuple[str, FieldInfo]]:
    """The fields ``model`` adds to its settings base class (the core model: all)."""
    base = next((b for b in model.__mro__[1:] if b in (m for _, m, _ in MODELS)), None)
    inherited = set(base.model_fields) if base is not None else set()
    for name, field in model.model_fields.items():
        if name not in inherited:
            yield name, field


def meaning(name: str, field: FieldInfo) -> str:
    text = field.description or MEANINGS.get(name)
    if not text:
        raise SystemExit(f"docs/mkdocs/gen_reference.py: setting {name!r} has no description: add "
                         "Field(description=...) or a line to MEANINGS")
    return text.replace("|", "\\|")


def settings_page() -> str:
    documented = {n for _, m, _ in MODELS for n in m.model_fields}
    stale = set(MEANINGS) - documented
    if stale:
        raise SystemExit(f"docs/mkdocs/gen_reference.py: MEANINGS names no setting: "
                         f"{sorted(stale)}")
    out: list[str] = []
    for title, model, intro in MODELS:
        out += [f"## {title}", "", intro, "", f"Model: `{model.__module__}.{model.__name__}`.",
                "", "| variable | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        for name, field in own_fields(model):
            out.append(f"| `{env_name(name, field)}` | `{type_text(field)}` "
                       f"| {default_text(name, field)} | {bounds_text(field)} "
                       f"| {meaning(name, field)} |")
        out.append("")
    return "\n".join(out + cli_env_lines())


def cli_env_lines() -> list[str]:
    """Options of the ``outbox`` command read from an environment variable of their own."""
    rows: list[str] = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            names = [param.envvar] if isinstance(param.envvar, str) else param.envvar or []
            for env in names:
                option = "/".join(param.opts)
                rows.append(f"| `{env}` | `{path} {option}` | {cell(param.help or '')} |"
                            if isinstance(param, click.Option) else f"| `{env}` | `{path}` | |")
        if isinstance(command, click.Group):
            for sub_name, sub in sorted(command.commands.items()):
                walk(sub, f"{path} {sub_name}")

    walk(cli, "outbox")
    if not rows:
        return []
    return ["## Command-line options", "",
            "Options of the `outbox` command that also read an environment variable of their "
            "own (the option wins), from the click parser:", "",
            "| variable | option | meaning |", "|---|---|---|", *rows, ""]


def schema_text(schema: dict[str, Any]) -> str:
    """A short type for a parameter or body schema."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(schema_text(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {schema_text(schema.get('items', {}))}"
    return f"`{schema.get('type', 'any')}`"


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def operation_lines(path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        out += [f"| `{p['name']}` | {p['in']} | {schema_text(p.get('schema', {}))} "
                f"| {'yes' if p.get('required') else 'no'} | {cell(p.get('description', ''))} |"
                for p in params]
        out.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        out += [f"Request body ({media}): {schema_text(content.get('schema', {}))}", ""]
    answers = ", ".join(f"`{code}` {cell(r.get('description', ''))}"
                        for code, r in op.get("responses", {}).items())
    return [*out, f"Responses: {answers}", ""]


def schema_lines(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [cell(schema["description"]), ""]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        out += ["| field | type | required | description |", "|---|---|---|---|"]
        out += [f"| `{field}` | {schema_text(prop)} | {'yes' if field in required else 'no'} "
                f"| {cell(prop.get('description', ''))} |" for field, prop in props.items()]
        out.append("")
    elif "enum" in schema:
        out += ["One of: " + ", ".join(f"`{v}`" for v in schema["enum"]), ""]
    return out


def http_page(doc: dict[str, Any]) -> str:
    out = [f"API version {doc['info']['version']}; the document this page was built from: "
           "[openapi.json](openapi.json).", "", "## Operations", ""]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            out += operation_lines(path, method, op)
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += schema_lines(name, schema)
    return "\n".join(out)


def fill(page: str, marker: str, generated: str) -> None:
    """Replace ``<!-- generated: MARKER -->`` in the page's source with ``generated``."""
    source = (CONTENT / page).read_text()
    tag = f"<!-- generated: {marker} -->"
    if source.count(tag) != 1:
        raise SystemExit(f"docs/mkdocs/gen_reference.py: {page} must hold {tag} once")
    with mkdocs_gen_files.open(page, "w") as f:
        f.write(source.replace(tag, generated))


def main() -> None:
    fill("reference/settings.md", "settings", settings_page())
    doc = create_app(Settings()).openapi()
    with mkdocs_gen_files.open("reference/openapi.json", "w") as f:
        json.dump(doc, f, indent=2)
    fill("reference/http-api.md", "http-api", http_page(doc))


main()
