"""Every (method, path) the app answers, read from the app itself so a route added later
is covered by the tests that iterate over them, and how to fill a path's parameters."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from starlette.routing import Mount, Route

PARAM = "{"


def _walk(routes: Sequence[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:  # FastAPI >= 0.13x: included routers stay routers
            for ctx in contexts():
                for method in sorted(ctx.methods or ()):
                    yield method, prefix + ctx.path
        elif isinstance(route, Mount):
            yield "GET", prefix + route.path + "/{path}"
        elif isinstance(route, Route) or hasattr(route, "methods"):
            for method in sorted(route.methods or ()):
                yield method, prefix + route.path


def all_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every route, HEAD left out (GET covers it)."""
    found = {(m, p) for m, p in _walk(app.routes) if m != "HEAD"}
    assert len(found) > 20, found  # the walk found the included routers
    return sorted(found, key=lambda r: (r[1], r[0]))


def fill(path: str, values: Mapping[str, Sequence[str]]) -> list[str]:
    """``path`` with each ``{name}`` replaced by each of ``values[name]`` (every
    combination); a name not in ``values`` gets ``values["*"]``."""
    names = [part.split("}")[0].split(":")[0] for part in path.split("{")[1:]]
    if not names:
        return [path]
    options = [values.get(n, values["*"]) for n in names]
    out = []
    for combo in itertools.product(*options):
        filled = path
        for name, value in zip(names, combo, strict=True):
            start = filled.index("{")
            end = filled.index("}", start)
            assert filled[start + 1:end].split(":")[0] == name
            filled = filled[:start] + value + filled[end + 1:]
        out.append(filled)
    return out


def is_portal(path: str) -> bool:
    portal = path == "/portal" or path.startswith(("/api/portal/", "/portal/"))
    return portal and path != "/portal/enter"
