"""The public/private line and the shape of the package.

- The public API is exactly the ``__all__`` of the modules in ``PUBLIC`` (``outbox``'s
  own included); the Python API reference documents these modules and nothing else.
- Every other module is private: an ``_underscore`` module or package, or the internals
  of an interface (the CLI's command modules, the web app's routes and pages, the worker
  package ``outbox.delivery``, which only :mod:`outbox.worker` imports).
- ``outbox/`` has no import cycle (function-level imports included).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import grimp
import pytest

import outbox

ROOT = Path(__file__).resolve().parents[2]

PUBLIC: dict[str, set[str]] = {
    "outbox": {
        "ConfigurationError", "DatabaseError", "DatabaseUnavailable", "DeliveryNotFound",
        "EndpointNotFound", "Event", "InvalidEndpoint", "InvalidEvent", "InvalidSignature",
        "InvalidWebhook", "MalformedWebhook", "MigrationError", "NotInTransaction",
        "OperationRefused", "OutboxError", "SchemaMissing", "Settings", "emit", "emit_async",
        "emit_many", "emit_many_async", "generate_secret", "get_settings", "verify",
    },
    "outbox.errors": {
        "ConfigurationError", "DatabaseError", "DatabaseUnavailable", "DeliveryNotFound",
        "EndpointNotFound", "EventTypeExists", "EventTypeNotFound", "InvalidEndpoint",
        "InvalidEvent",
        "InvalidEventType", "InvalidSignature",
        "InvalidWebhook", "MalformedWebhook", "MigrationError", "NotInTransaction",
        "OperationRefused", "OutboxError", "SchemaMissing",
    },
    "outbox.settings": {"DEFAULT_DATABASE_URL", "Settings", "get_settings", "invalid_settings",
                        "mask_url"},
    "outbox.signing": set(),  # filled from the module: checked against the docs page below
    "outbox.inbox": set(),
    "outbox.testing": set(),  # its own page (docs/guides/testing.md) documents the names
    "outbox.worker": {"demo_runner", "drain", "ping", "run_worker", "worker_settings"},
    "outbox.admin.endpoints": {
        "ACTORS", "Created", "DESCRIPTION_MAX_LENGTH", "DeliveryCredentials", "Endpoint",
        "PublicKey", "Rotated",
        "URL_MAX_LENGTH", "Updated", "add", "check_destination", "delivery_credentials", "get",
        "list_all", "parse_id", "public_keys", "rotate_secret", "set_enabled",
        "set_tenant_rate_limit",
        "signing_secrets", "update", "url_credentials", "validate_headers", "validate_text",
        "validate_url",
    },
    "outbox.admin.filters": {
        "COMPARISONS", "FILTER_MAX_BYTES", "FILTER_MAX_CONDITIONS", "FILTER_MAX_DEPTH",
        "IN_MAX_VALUES", "OPERATORS", "PATH_MAX_SEGMENTS", "SEGMENT_MAX_CHARS", "Compiled",
        "FilterTest", "compile_filter", "filter_params", "try_filter",
    },
    "outbox.admin.deadletter": {
        "Attempt", "DeadCursor", "DeadDelivery", "DeadPage", "DeliveryDetail", "Selection",
        "SkipResult", "each_dead", "list_dead", "parse_delivery_id", "show", "skip",
    },
    "outbox.admin.replay": {"EndpointShare", "ReplayPlan", "ReplayResult", "plan_replay",
                            "refusal", "replay"},
    "outbox.admin.events": {
        "AttemptRow", "EndpointHealth", "EndpointPage", "EventDelivery", "EventDetail",
        "EventNotFound", "EventPage", "EventSummary", "MAX_PAGE", "endpoint_health",
        "get_event", "id_floor", "list_endpoints", "list_events", "owned_deliveries",
        "parse_event_id",
    },
    "outbox.admin.stats": {"DueSummary", "EndpointStats", "Snapshot", "TenantBacklog",
                           "by_endpoint", "due_summary", "snapshot", "top_tenants"},
    "outbox.admin.partitions": {"DropProgress", "DropResult", "EventPartition", "Partition",
                                "advance", "drop_expired", "event_status", "status"},
    "outbox.admin.retention": {"PruneProgress", "PruneResult", "prune", "uuid7_floor"},
    "outbox.admin.portal": {
        "DEFAULT_BASE_URL", "InvalidToken", "LINK_MAX", "LINK_MIN", "MIN_SECRET_LENGTH",
        "PortalLink", "WebSettings", "check_secrets", "mint_link", "open_link", "open_token",
        "sign", "signing_key", "web_settings",
    },
    "outbox.admin.secrets": {"reencrypt"},
    "outbox.admin.migrations": {"Cursor", "Migration", "apply_in_transaction", "available",
                                "migrate", "script"},
    "outbox.admin.activity": {"Minute", "last_hour"},
    "outbox.admin.sessions": {"is_revoked", "revoke"},
    "outbox.admin.endpoint_options": {"CREDENTIAL_MAX", "CredentialChanges",
                                      "EndpointCredentials", "PEM_MAX", "RATE_MAX",
                                      "EndpointOptions", "HEADERS_MAX", "HEADER_NAME_MAX",
                                      "HEADER_VALUE_MAX", "Headers", "RESERVED_HEADERS",
                                      "RESERVED_PREFIX", "SIGNATURES", "Signature",
                                      "TEXT_PATTERN", "check_headers",
                                      "describe_errors", "limits"},
    "outbox.admin.endpoint_oauth2": {"CLIENT_ID_MAX", "CLIENT_SECRET_MAX", "OAuth2Fields",
                                     "OAuth2Options", "SCOPE_MAX", "TOKEN_URL_MAX", "client_secret",
                                     "fields",
                                     "oauth2_params"},
    "outbox.admin.flow": {"FlowState", "describe", "state", "states"},
    "outbox.admin.capture": {"OPERATIONS", "Capture", "add", "add_statement", "list_captures",
                             "remove", "remove_statement"},
    "outbox.admin.types": {"DESCRIPTION_MAX_LENGTH", "EventType", "add", "check_example",
                           "check_name", "check_schema", "check_subscribable", "deprecate", "get",
                           "get_offered", "list_all", "offered",
                           "put",
                           "remove", "update"},
    "outbox.admin.type_export": {"FORMATS", "HEADERS", "asyncapi", "component_names", "export",
                                 "jsonschema_bundle", "openapi"},
    "outbox.types": {"EventType", "Registered", "event", "event_type", "publish", "register",
                     "registered", "schema_of"},
    "outbox.admin.opevents": {"TYPES", "OperationalEvent", "recent"},
    "outbox.cli": {"cli", "load_commands", "main"},
    "outbox.web": set(),
    "outbox.contrib.fastapi": set(),
    "outbox.contrib.flask": set(),
    "outbox.contrib.django": set(),
    "outbox.contrib.alembic": set(),
}
# Packages whose submodules are an interface's internals (not API, no underscore needed).
INTERFACE_INTERNALS = ("outbox.cli.", "outbox.web.", "outbox.delivery", "outbox.contrib.django.",
                       "outbox.migrations")
# outbox.testing's modules: the plugin, the receiver, the throwaway PostgreSQL.
OPTIONAL_PUBLIC = ("outbox.testing.",)


def _modules() -> list[str]:
    found = ["outbox"]
    for info in pkgutil.walk_packages(outbox.__path__, "outbox."):
        found.append(info.name)
    return found


def _private(name: str) -> bool:
    return any(part.startswith("_") and part not in ("__main__",) for part in name.split("."))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_module_declares_exactly_its_api(name: str) -> None:
    module = importlib.import_module(name)
    declared = getattr(module, "__all__", None)
    assert declared is not None, f"{name} declares no __all__"
    assert len(declared) == len(set(declared)), f"{name}.__all__ repeats a name"
    for symbol in declared:
        assert hasattr(module, symbol), f"{name}.__all__ names {symbol!r}, which is missing"
    if PUBLIC[name]:
        assert set(declared) == PUBLIC[name], f"{name}: API changed: update PUBLIC and the docs"


def test_every_module_is_public_private_or_interface_internal() -> None:
    stray = [m for m in _modules() if m not in PUBLIC and not _private(m)
             and not m.startswith(INTERFACE_INTERNALS) and not m.startswith(OPTIONAL_PUBLIC)
             and m not in ("outbox.__main__", "outbox.admin", "outbox.contrib")]
    assert not stray, f"neither public (PUBLIC), private (_name) nor interface internals: {stray}"


def test_no_private_module_is_documented_as_api() -> None:
    page = ROOT / "docs" / "reference" / "python.md"
    if not page.exists():
        pytest.fail(f"{page} is missing: the Python API reference lists the public modules")
    documented = set(re.findall(r"^::: ([\w.]+)", page.read_text(), re.M))
    assert not {d for d in documented if _private(d)}, "a private module is documented"
    missing = set(PUBLIC) - documented - {"outbox.cli"}
    assert not missing, f"public modules missing from {page.name}: {sorted(missing)}"
    extra = documented - set(PUBLIC)
    assert not extra, f"{page.name} documents modules that are not in PUBLIC: {sorted(extra)}"


@pytest.mark.parametrize("package", ["outbox", "bench"])
def test_no_import_cycle(package: str) -> None:
    """Neither the package nor the benchmarks import themselves in a circle (a
    function-level import included)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_every_statement_of_the_registry_is_exported() -> None:
    from outbox._db import queries

    for info in pkgutil.iter_modules(queries.__path__, "outbox._db.queries."):
        module = importlib.import_module(info.name)
        names = {n for n in vars(module) if re.fullmatch(r"[A-Z][A-Z0-9_]+", n)}
        missing = names - set(queries.__all__)
        assert not missing, f"{info.name}: not re-exported by outbox._db.queries: {missing}"


def test_every_statement_of_the_worker_registry_is_exported() -> None:
    from outbox.delivery import queries

    for info in pkgutil.iter_modules(queries.__path__, "outbox.delivery.queries."):
        module = importlib.import_module(info.name)
        names = {n for n in vars(module) if re.fullmatch(r"[A-Z][A-Z0-9_]+", n)}
        missing = names - set(queries.__all__)
        assert not missing, f"{info.name}: not re-exported by outbox.delivery.queries: {missing}"
        unbound = {n for n in names if getattr(queries, n) is not getattr(module, n)}
        assert not unbound, f"{info.name}: outbox.delivery.queries.NAME differs: {unbound}"


def _registry_sources() -> list[Path]:
    return sorted([*(ROOT / "outbox" / "_db" / "queries").glob("*.py"),
                   *(ROOT / "delivery" / "queries").glob("*.py")])


@pytest.mark.parametrize("path", _registry_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_sql_registries_build_no_statement_by_string_surgery(path: Path) -> None:
    """A statement is its text, joined from named fragments at most: never another
    statement with words replaced (``.replace``), and no module-level ``assert`` guarding
    one (``python -O`` removes it)."""
    tree = ast.parse(path.read_text())
    surgery = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("replace", "sub")]
    asserts = [node.lineno for node in tree.body if isinstance(node, ast.Assert)]
    assert not surgery, f"{path.name}: SQL built by .replace()/re.sub() at lines {surgery}"
    assert not asserts, f"{path.name}: module-level assert at lines {asserts}"


ROLE = re.compile(r":(?:mod|func|class|data|attr|meth|exc|obj):`~?(outbox\.[\w.]+)`")


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_docstring_cross_references_name_modules_that_exist() -> None:
    """A ``:mod:``/``:func:``/``:class:``... reference to ``outbox.*`` in the package's
    sources names something importable: a module that moved leaves no stale path."""
    sources = [p for p in [*(ROOT / "outbox").rglob("*.py"), *(ROOT / "delivery").rglob("*.py")]
               if "outbox/delivery" not in p.as_posix()]
    stale = [f"{p.relative_to(ROOT)}: {ref}" for p in sources
             for ref in ROLE.findall(p.read_text()) if not _resolves(ref)]
    assert sources and not stale, f"references to nothing: {stale}"


def test_no_source_file_cites_an_issue_number() -> None:
    """Code, SQL, configuration and scripts say why, not which ticket (no "issue" followed
    by its number)."""
    suffixes = {".py", ".sql", ".toml", ".yml", ".yaml", ".sh", ".html", ".css", ".cfg", ".ini"}
    skip = {".venv", "site", ".git", "node_modules", "__pycache__"}
    files = [p for p in ROOT.rglob("*") if p.suffix in suffixes and p.is_file()
             and not skip & set(p.relative_to(ROOT).parts)
             and ".egg-info" not in p.as_posix() and "outbox/delivery" not in p.as_posix()]
    cited = [f"{p.relative_to(ROOT)}: {m}" for p in files
             for m in re.findall(r"\bissues?\s*#?\d+", p.read_text(errors="replace"), re.I)]
    assert len(files) > 100 and not cited, f"issue numbers cited: {cited}"


def test_every_public_module_of_outbox_testing_declares_its_api() -> None:
    """outbox.testing's own modules (the plugin, the receiver, the throwaway PostgreSQL,
    captured events) are imported by users' suites by name: each declares ``__all__``,
    every name in it exists, and the plugin's lists every fixture it defines."""
    import outbox.testing

    names = [m.name for m in pkgutil.iter_modules(outbox.testing.__path__, "outbox.testing.")
             if not _private(m.name)]
    assert {"outbox.testing.plugin", "outbox.testing.postgres",
            "outbox.testing.receiver", "outbox.testing.events"} <= set(names)
    for name in names:
        module = importlib.import_module(name)
        declared = getattr(module, "__all__", None)
        assert declared is not None, f"{name} declares no __all__"
        assert sorted(declared) == sorted(set(declared)), f"{name}.__all__ repeats a name"
        assert all(hasattr(module, n) for n in declared), f"{name}.__all__ names a missing one"
    plugin = importlib.import_module("outbox.testing.plugin")
    fixtures = {n for n, v in vars(plugin).items()
                if hasattr(v, "_fixture_function_marker") or hasattr(v, "_pytestfixturefunction")
                or type(v).__name__ == "FixtureFunctionDefinition"}
    assert fixtures and fixtures <= set(plugin.__all__), fixtures - set(plugin.__all__)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_a_public_modules_own_public_functions_and_classes_are_in_its_all(name: str) -> None:
    """A function or class a public module defines under a name without ``_`` is API (the
    CLI and the web app call it): ``__all__`` names it, so the reference documents it."""
    module = importlib.import_module(name)
    own = {n for n, v in vars(module).items()
           if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
           and getattr(v, "__module__", None) == name}
    unlisted = own - set(getattr(module, "__all__", ()))
    assert not unlisted, f"{name}: public but not in __all__: {sorted(unlisted)}"
