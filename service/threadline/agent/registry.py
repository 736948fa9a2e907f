"""The graphs a replica serves: the built-in ``chat`` graph plus those a ``langgraph.json`` names.

``LANGGRAPH_CONFIG`` names a ``langgraph.json`` in the LangGraph CLI format. Its ``graphs``
map a graph id to ``./file.py:attr`` (relative to the json file), ``package.module:attr``, or
``{"path": <either>, "description": …}``. Its other keys (:data:`KNOWN_KEYS`; any other is a
start-up warning naming it):

* ``dependencies``: local directories (``"."``, ``"./src"``, relative to the json) go on
  ``sys.path``, as the CLI's image build installs them, so a ``module:attr`` inside them
  imports; a package (``"langchain-openai>=1.0"``) must already be installed in the image:
  threadline installs nothing at start-up, and refuses to start, saying how to add it, when it
  is missing.
* ``env``: a map or a ``.env`` file (relative to the json) of variables for the graphs, set
  before they are imported. The deployment's own environment wins over it, and threadline's
  settings are read before it (set those in the deployment): only the graphs see ``env``.
* ``http.cors``: CORS in LangGraph's format, handed to :mod:`threadline.api.cors`.

The attribute may be a compiled graph, a ``StateGraph`` (compiled here) or a factory, as
langgraph-api accepts them (ADR 0018; :mod:`threadline.agent.factories`): a factory is called
for every run and once at start-up, and a plain graph is built once and shared by every run.

threadline supplies the checkpointer. A graph compiled with a checkpointer of its own is
refused, and so is one that fails to import, whose factory fails, or that is not a graph; each
stops start-up with a :class:`~threadline.config.ConfigError` that names ``LANGGRAPH_CONFIG``,
the graph id and the cause. Without ``LANGGRAPH_CONFIG`` the built-in chat graph is served as
``chat``; with it, ``chat`` stays unless the config defines its own.

Its ``auth.path`` (custom auth, :mod:`threadline.custom_auth`) is imported the same way by
:func:`import_auth`, relative to the json file with the ``dependencies`` importable.

Two phases, so that a broken config stops start-up before any store is opened:
:func:`import_graphs` (reads, imports, calls factories, checks; needs no store) then
:func:`bind_graphs` and :func:`bind_factories` (attach the checkpointer; cannot fail).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from threadline.agent.factories import (
    GraphFactory,
    bound_graph,
    classified,
    is_factory,
    made_at_start,
    run_sync,
)
from threadline.agent.graph import build_graph
from threadline.config import ConfigError

log = logging.getLogger(__name__)

CHAT = "chat"
"""The id of the built-in chat graph."""

VARIABLE = "LANGGRAPH_CONFIG"

# The langgraph.json keys threadline reads; any other is a start-up warning naming it. Who
# serves a new key adds its name here (one per line).
KNOWN_KEYS = frozenset(
    {
        "$schema",  # editor support only
        "graphs",
        "dependencies",
        "env",
        "http",
        "auth",  # custom auth: import_auth
        "store",  # long-term memory's index and TTL: threadline.store.store_options
        "webhooks",  # run webhooks' URL policy, headers, fields: threadline.webhooks.webhook_policy
    }
)
# Under ``http``: the keys threadline reads (langgraph-api has more, e.g. ``app``, ``mount_prefix``).
KNOWN_HTTP_KEYS = frozenset({"cors"})

# Errors whose text says what is wrong without echoing data: a module name, a file, a line.
# Anything else a user's module raises is reported by type and place only, since its text
# may hold a value read from the environment (an API key in a client's error, say).
_SAFE_TEXT = (ImportError, SyntaxError, AttributeError, FileNotFoundError, NameError)


@dataclass(frozen=True)
class GraphSpec:
    """One entry of ``graphs``: where the graph lives."""

    graph_id: str
    source: str
    """As written in the config (``./agent.py:graph``), for messages."""
    path: Path | None
    """The resolved file, for ``file.py:attr``; ``None`` for ``module:attr``."""
    module: str | None
    attr: str
    description: str | None = None


@dataclass(frozen=True)
class Deployment:
    """What a ``langgraph.json`` says, once read (its graphs not imported yet)."""

    path: Path
    graphs: dict[str, GraphSpec]
    cors: dict[str, Any] | None = None
    """``http.cors`` as written (checked by :func:`threadline.api.cors.cors_options`)."""
    auth: object = None
    """``auth`` as written (read by :func:`import_auth`)."""
    store: object = None
    """``store`` as written (read by :func:`threadline.store.store_options`)."""
    webhooks: object = None
    """``webhooks`` as written (read by :func:`threadline.webhooks.webhook_policy`)."""


def read_config(config_path: Path) -> dict[str, GraphSpec]:
    """Parse a ``langgraph.json`` into graph specs (no import yet); see :func:`read_deployment`."""
    return read_deployment(config_path).graphs


def read_deployment(config_path: Path) -> Deployment:
    """Read a ``langgraph.json``: its graphs (no import yet), ``dependencies`` (local ones on
    ``sys.path``, packages checked), ``env`` (into the process environment) and ``http.cors``.
    Keys threadline does not serve are logged as warnings, by name.

    Raises:
        ConfigError: the file is missing or not JSON, an entry of ``graphs`` is malformed, a
            dependency is missing, or ``env`` cannot be read.
    """
    try:
        document = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{VARIABLE}: no such file {str(config_path)!r}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{VARIABLE}: cannot read {str(config_path)!r} ({type(exc).__name__})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{VARIABLE}: {str(config_path)!r} is not JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    graphs = document.get("graphs") if isinstance(document, dict) else None
    if not isinstance(graphs, dict) or not graphs:
        raise ConfigError(f"{VARIABLE}: {str(config_path)!r} needs a non-empty `graphs` object")
    base = config_path.resolve().parent
    specs: dict[str, GraphSpec] = {}
    for graph_id, entry in graphs.items():
        description = None
        if isinstance(entry, dict):
            description = entry.get("description")
            entry = entry.get("path")
        location, sep, attr = entry.rpartition(":") if isinstance(entry, str) else ("", "", "")
        if not sep or not location or not attr.isidentifier():
            raise ConfigError(
                f"{VARIABLE}: graph {graph_id!r}: expected './file.py:attr' or 'package.module:attr'"
            )
        if location.endswith(".py") or "/" in location:
            if not location.endswith(".py"):
                raise ConfigError(
                    f"{VARIABLE}: graph {graph_id!r}: only Python graphs (a .py file) are served"
                )
            specs[graph_id] = GraphSpec(graph_id, entry, (base / location).resolve(), None, attr, description)
        else:
            specs[graph_id] = GraphSpec(graph_id, entry, None, location, attr, description)
    _warn_unserved(document)
    _add_dependencies(document.get("dependencies"), base)
    _apply_env(document.get("env"), base)
    http = document.get("http")
    cors = http.get("cors") if isinstance(http, dict) else None
    return Deployment(
        config_path, specs, cors, document.get("auth"), document.get("store"), document.get("webhooks")
    )


def _warn_unserved(document: dict[str, Any]) -> None:
    """A warning per key threadline does not serve, so nothing is ignored without a word."""
    for key in sorted(set(document) - KNOWN_KEYS):
        log.warning("langgraph.json key %r is not served by threadline and is ignored", key)
    http = document.get("http")
    if http is not None and not isinstance(http, dict):
        raise ConfigError(f"{VARIABLE}: `http` must be an object")
    for key in sorted(set(http or {}) - KNOWN_HTTP_KEYS):
        log.warning("langgraph.json key 'http.%s' is not served by threadline and is ignored", key)


def _is_local(dependency: str) -> bool:
    return dependency.startswith((".", "/"))


def _add_dependencies(dependencies: object, base: Path) -> None:
    """Local dependency directories on ``sys.path`` (first, once each); packages checked.

    Raises:
        ConfigError: a local one is not a directory, or a package is not installed.
    """
    if dependencies is None:
        return
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise ConfigError(f"{VARIABLE}: `dependencies` must be a list of paths and package names")
    for dependency in dependencies:
        if _is_local(dependency):
            directory = (base / dependency).resolve()
            if not directory.is_dir():
                raise ConfigError(f"{VARIABLE}: dependency {dependency!r} is not a directory")
            if str(directory) not in sys.path:
                sys.path.insert(0, str(directory))
        else:
            _check_installed(dependency)


def _check_installed(dependency: str) -> None:
    """A package dependency (a pip requirement) must be installed, at a version it allows."""
    from packaging.requirements import InvalidRequirement, Requirement

    how = (
        "threadline installs nothing at start-up: install it in the image "
        "(`RUN pip install '<requirement>'` in a Dockerfile FROM threadline, README "
        '"Deploy your own graph")'
    )
    try:
        requirement = Requirement(dependency)
    except InvalidRequirement:
        raise ConfigError(
            f"{VARIABLE}: dependency {dependency!r} is neither a local path nor a package"
        ) from None
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"{VARIABLE}: dependency {dependency!r} is not installed; {how}") from None
    if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
        raise ConfigError(
            f"{VARIABLE}: dependency {dependency!r} needs another version (installed: {version}); {how}"
        )


def _apply_env(env: object, base: Path) -> None:
    """``env`` (a map, or a ``.env`` file relative to the json) into the process environment,
    for the graphs; a variable the deployment set keeps its value. Values are never logged.

    Raises:
        ConfigError: ``env`` is neither, or its file cannot be read.
    """
    if env is None:
        return
    if isinstance(env, str):
        from dotenv import dotenv_values

        path = (base / env).resolve()
        if not path.is_file():
            raise ConfigError(f"{VARIABLE}: env file {env!r} not found")
        values = {k: v for k, v in dotenv_values(path).items() if v is not None}
    elif isinstance(env, dict) and all(isinstance(v, (str, int, float, bool)) for v in env.values()):
        values = {str(k): str(v) for k, v in env.items()}
    else:
        raise ConfigError(f"{VARIABLE}: `env` must be an object of variables or the path of a .env file")
    kept = sorted(k for k in values if k in os.environ)
    for key, value in values.items():
        os.environ.setdefault(key, value)
    if kept:
        log.info("langgraph.json env: the deployment's own value wins", extra={"variables": kept})


def import_graphs(config_path: Path | Deployment | None) -> dict[str, Pregel | StateGraph | GraphFactory]:
    """Import every graph ``config_path`` names (a path, or a :class:`Deployment` already
    read) and check it; no checkpointer attached yet.

    Factories are called once here (async ones too, on a loop of their own when one is
    running; a context entered and exited) to check that they make a graph.

    Returns:
        graph id → a compiled graph without checkpointer, a ``StateGraph`` to compile, or a
        :class:`GraphFactory`. Empty when ``config_path`` is ``None``.

    Raises:
        ConfigError: naming ``LANGGRAPH_CONFIG``, the graph id and the cause.
    """
    if config_path is None:
        return {}
    modules: dict[str, ModuleType] = {}  # one import per file or module, shared by its graphs
    graphs: dict[str, Pregel | StateGraph | GraphFactory] = {}
    deployment = config_path if isinstance(config_path, Deployment) else read_deployment(config_path)
    for graph_id, spec in deployment.graphs.items():
        where = f"{VARIABLE}: graph {graph_id!r} ({spec.source})"
        try:
            key = str(spec.path) if spec.path else str(spec.module)
            if key not in modules:
                modules[key] = _import(spec)
            if not hasattr(modules[key], spec.attr):
                raise ConfigError(f"{spec.attr!r} is not defined there")
            value = getattr(modules[key], spec.attr)
            factory = None
            if is_factory(value):
                factory = GraphFactory(graph_id, value, classified(value))
                graph = run_sync(made_at_start(factory))
            else:
                graph = value
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except Exception as exc:  # any failure of user code stops start-up, named
            raise ConfigError(f"{where}: {_describe(exc)}") from None
        graph = _checked(graph, where)
        graphs[graph_id] = replace(factory, graph=graph) if factory is not None else graph
    return graphs


def bind_graphs(
    graphs: dict[str, Pregel | StateGraph | GraphFactory],
    model: BaseChatModel,
    checkpointer: BaseCheckpointSaver,
) -> dict[str, Pregel]:
    """Attach ``checkpointer`` to every graph of :func:`import_graphs` (a factory's: the one it
    made at start-up); add ``chat`` unless defined.

    Returns:
        graph id → compiled graph persisting through ``checkpointer``; ``chat`` first.
    """
    bound: dict[str, Pregel] = {}
    if CHAT not in graphs:
        bound[CHAT] = build_graph(model, checkpointer)
    for graph_id, graph in graphs.items():
        made = graph.graph if isinstance(graph, GraphFactory) else graph
        assert made is not None  # import_graphs checked it
        bound[graph_id] = bound_graph(graph_id, made, checkpointer)
    return bound


def bind_factories(
    graphs: dict[str, Pregel | StateGraph | GraphFactory], checkpointer: BaseCheckpointSaver
) -> dict[str, GraphFactory]:
    """The factories of :func:`import_graphs`, their graphs to be bound to ``checkpointer``."""
    return {
        graph_id: replace(graph, checkpointer=checkpointer)
        for graph_id, graph in graphs.items()
        if isinstance(graph, GraphFactory)
    }


def _import(spec: GraphSpec) -> ModuleType:
    if spec.module is not None:
        return importlib.import_module(spec.module)
    assert spec.path is not None
    if not spec.path.is_file():
        raise ConfigError(f"no such file {str(spec.path)!r}")
    # A stable, unique module name per file, registered in sys.modules so that pickling,
    # typing.get_type_hints and dataclasses can find the module of the graph's state class.
    digest = hashlib.sha256(str(spec.path).encode()).hexdigest()[:10]
    name = f"threadline_graphs.{spec.path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, spec.path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"cannot import {str(spec.path)!r} as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _checked(graph: object, where: str) -> Pregel | StateGraph:
    if isinstance(graph, StateGraph):
        return graph
    if not isinstance(graph, Pregel):
        raise ConfigError(f"{where}: is a {type(graph).__name__}, not a graph, StateGraph or graph factory")
    if isinstance(graph.checkpointer, BaseCheckpointSaver):
        raise ConfigError(
            f"{where}: compiled with its own checkpointer ({type(graph.checkpointer).__name__}); "
            "compile it without one: threadline supplies the checkpointer (CHECKPOINT_BACKEND)"
        )
    if graph.checkpointer is False:
        raise ConfigError(f"{where}: compiled with checkpointer=False; threadline must persist its state")
    return graph


def _describe(exc: BaseException) -> str:
    """The cause of a failed import or factory, without echoing data the error may carry."""
    if isinstance(exc, _SAFE_TEXT):
        return f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    place = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__} raised{place}"


def import_auth(deployment: Path | Deployment | None) -> object | None:
    """The ``langgraph_sdk.Auth`` that the config's ``"auth": {"path": …}`` names, or None.

    The path is ``./file.py:attr`` relative to the json file or ``package.module:attr``, with
    the config's local ``dependencies`` importable (:func:`read_deployment` put them on the path).

    Raises:
        ConfigError: naming ``LANGGRAPH_CONFIG`` ``auth.path`` and the cause.
    """
    if deployment is None:
        return None
    if isinstance(deployment, Path):
        deployment = read_deployment(deployment)
    section = deployment.auth
    if section is None:
        return None
    where = f"{VARIABLE}: `auth.path`"
    path = section.get("path") if isinstance(section, dict) else None
    if path is None:
        return None  # `auth` with only openapi/disable_studio_auth: no custom authentication
    value = import_object(deployment, path, where)
    from langgraph_sdk import Auth

    if not isinstance(value, Auth):
        raise ConfigError(f"{where} ({path}): is a {type(value).__name__}, not a langgraph_sdk.Auth")
    return value


def import_object(deployment: Deployment, path: object, where: str) -> object:
    """What ``path`` names: ``./file.py:attr`` relative to the json file, or
    ``package.module:attr``, with the config's local ``dependencies`` importable.

    Raises:
        ConfigError: naming ``where`` (the config key) and the cause.
    """
    location, sep, attr = path.rpartition(":") if isinstance(path, str) else ("", "", "")
    if not sep or not location or not attr.isidentifier():
        raise ConfigError(f"{where}: expected './file.py:attr' or 'package.module:attr'")
    base = deployment.path.resolve().parent
    if location.endswith(".py") or "/" in location:
        spec = GraphSpec(attr, str(path), (base / location).resolve(), None, attr)
    else:
        spec = GraphSpec(attr, str(path), None, location, attr)
    try:
        module = _import(spec)
        if not hasattr(module, attr):
            raise ConfigError(f"{attr!r} is not defined there")
    except ConfigError as exc:
        raise ConfigError(f"{where} ({path}): {exc}") from None
    except Exception as exc:  # the module's own failure stops start-up, named
        raise ConfigError(f"{where} ({path}): {_describe(exc)}") from None
    return getattr(module, attr)
