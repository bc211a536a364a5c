"""optuna-dashboard that tells the truth about constraints, and `autotune dashboard`.

optuna-dashboard 0.21 knows a trial's feasibility only from the old list-valued
trial system attribute `constraints`; Optuna 5's `trial.set_constraint` stores
one `constraints:<key>` attribute per key, so the dashboard shows every trial as
feasible. It also picks its "Best Trial" by value alone
(`RDBStorage.get_best_trial` ignores constraints). Two fixes, both for 0.21 as
released:

- the study also writes the list form when it records a trial
  (`write_legacy_constraints`), so a plain `optuna-dashboard sqlite:///autotune.db`
  greys infeasible trials out;
- `autotune dashboard` (`serve`) runs the dashboard's own app with a Bottle plugin
  on the study-detail API that fills the list form for trials recorded without it
  and replaces the dashboard's best trials with autotune's own (`study.best_trials`:
  the best feasible trial, or the feasible Pareto front; none while nothing is
  feasible).

`autotune dashboard` also shows every parameter as the knob the server runs:
a knob whose range depends on others (draft tokens, bounded by steps and topk)
is stored as a fraction of its range (`speculative_num_draft_tokens_frac`),
which means nothing in a slice plot or a parameter-importance chart.
`show_knobs` makes the dashboard's storage hand out trials with the decoded
knobs instead (`SearchSpace.decode`, the same mapping the study deploys);
what the dashboard writes (notes, user attributes) goes to the study unchanged.

Optuna reads both forms (`_get_constraints_from_system_attrs` merges the list as
keys "0", "1", ... with the named keys), so feasibility and `study.best_trial`
are unchanged. TPE ranks infeasible trials by the sum of their violations, which
the list doubles for every trial alike: the ranking, and so TPE, is unchanged as
long as every trial carries both forms (tests/commands/test_dashboard.py checks it).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import AutotuneError
from autotune.log import get
from autotune.search import study as st
from autotune.search.constraints import (  # noqa: F401 - the public surface of this module
    LEGACY_KEY,
    keyed_constraints,
    legacy_list,
    write_legacy_constraints,
)
from autotune.store import optuna_private, storage
from autotune.store.artifacts import artifact_store
from autotune.store.optuna_private import ArtifactStore

if TYPE_CHECKING:
    from autotune.config import Config
    from autotune.space import SearchSpace

log = get("autotune.commands.dashboard")

DEFAULT_PORT = 8080
HOST = "127.0.0.1"  # the study DB holds the fleet's configs: never serve it beyond this host

#: The study-detail route of optuna-dashboard 0.21 (`_app.py`), the one the plugin corrects.
STUDY_DETAIL_RULE = "/api/studies/<study_id:int>"


# -- the plugin that corrects the study-detail API ---------------------------------------
class TruthPlugin:
    """Bottle plugin: the dashboard's study detail with real feasibility and best trials."""

    name = "autotune_truth"
    api = 2

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage

    def apply(self, callback: Callable[..., Any], route: Any) -> Callable[..., Any]:
        if route.method != "GET" or route.rule != STUDY_DETAIL_RULE:
            return callback

        @functools.wraps(callback)
        def corrected(*args: Any, **kwargs: Any) -> Any:
            body = callback(*args, **kwargs)
            # Errors come back as JSON strings and pass through untouched.
            if isinstance(body, dict) and "trials" in body and "best_trials" in body:
                self.correct(int(kwargs["study_id"]), body)
            return body

        return corrected

    def correct(self, study_id: int, body: dict[str, Any]) -> None:
        from optuna_dashboard._serializer import serialize_frozen_trial

        try:
            name = self.storage.get_study_name_from_id(study_id)
            study = optuna.Study(study_name=name, storage=self.storage)
            trials = {optuna_private.trial_id(t): t for t in study.get_trials(deepcopy=False)}
            for serialized in body["trials"]:
                _fill_constraints(serialized, trials.get(serialized["trial_id"]))
            system_attrs = self.storage.get_study_system_attrs(study_id)
            best = []
            for t in st.best_trials(study):
                serialized = serialize_frozen_trial(study_id, t, system_attrs)
                _fill_constraints(serialized, t)
                best.append(serialized)
            body["best_trials"] = best
        except Exception as exc:
            # Never let the dashboard badge a trial we could not check.
            log.error("could not check the study's constraints", study_id=study_id, error=repr(exc))
            body["best_trials"] = []


def _fill_constraints(serialized: dict[str, Any], t: FrozenTrial | None) -> None:
    if t is not None and not serialized.get("constraints"):
        serialized["constraints"] = legacy_list(keyed_constraints(t))


# -- knobs as the server runs them -----------------------------------------------------------
def show_knobs(db: BaseStorage, space: SearchSpace) -> None:
    """Make `db` return trials whose params are the decoded knobs (for the dashboard only)."""
    if not any(p.dependent_range for p in space.params.values()):
        return  # every knob is stored as itself already
    dists = knob_distributions(space)
    # Every way in: an `optuna.Study` made on this storage (optuna-dashboard's parameter
    # importance makes one) wraps it in `_CachedStorage`, which reads `_get_trials`.
    for name in ("get_all_trials", "get_trial", "_get_trials"):
        if hasattr(db, name):
            setattr(db, name, _decoding(getattr(db, name), space, dists))


def _decoding(read: Callable[..., Any], space: SearchSpace, dists: dict[str, Any]) -> Any:
    def reader(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if isinstance(found, FrozenTrial):
            return decoded(space, dists, found)
        return [decoded(space, dists, t) for t in found]

    return reader


def knob_distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """Each knob's distribution over every value the space can give it."""
    coords = space.distributions()
    out: dict[str, BaseDistribution] = {}
    values: dict[str, set[Any]] = {}
    if space.enumerable():
        for cand in space.enumerate():
            for name, v in cand.params.items():
                values.setdefault(name, set()).add(v)
    for name in space.order:
        p = space.params[name]
        if p.fixed:
            continue
        if not p.dependent_range:
            out[name] = coords[p.study_name]
        elif values.get(name):
            out[name] = IntDistribution(min(values[name]), max(values[name]), log=p.log)
    return out


def decoded(space: SearchSpace, dists: dict[str, BaseDistribution], t: FrozenTrial) -> FrozenTrial:
    """`t` with its params as knobs; unchanged if they do not decode (a foreign trial)."""
    try:
        config = space.decode(t.params)
    except (KeyError, TypeError, ValueError):
        return t
    params = {n: v for n, v in config.items() if n in dists}
    if not all(dists[n]._contains(dists[n].to_internal_repr(v)) for n, v in params.items()):
        return t
    out = copy.copy(t)
    out._params = params
    out._distributions = {n: dists[n] for n in params}
    return out


def make_app(storage: BaseStorage, artifacts: ArtifactStore | None) -> Any:
    """optuna-dashboard's WSGI app on `storage`, serving `artifacts`, with `TruthPlugin`."""
    import optuna_dashboard

    app = optuna_dashboard.wsgi(storage, artifact_store=artifacts)
    app.install(TruthPlugin(storage))
    return app


# -- `autotune dashboard` ------------------------------------------------------------------
def open_storage(url: str, source: str | None = None) -> RDBStorage:
    """The study DB for reading beside running workers: waits for their locks, creates nothing."""
    return storage.open_storage(url, source=source, create=False)


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open request must not keep Ctrl-C waiting


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the browser polls every few seconds: one line per request drowns the URL


def serve(cfg: Config, port: int = DEFAULT_PORT) -> int:
    """Serve optuna-dashboard for the study on 127.0.0.1:`port` until Ctrl-C; print its URL."""
    db = open_storage(cfg.study.storage, cfg.source)
    show_knobs(db, cfg.space)
    # Served even before the first trial stored its files: the folder appears with them.
    app = make_app(db, artifact_store(cfg.study.storage, db.engine))
    try:
        server = make_server(
            HOST, port, app, server_class=_ThreadedServer, handler_class=_QuietHandler
        )
    except OSError as exc:
        raise AutotuneError(f"cannot listen on {HOST}:{port}: {exc.strerror}; try --port") from None
    url = f"http://{HOST}:{server.server_port}/dashboard"
    try:
        study_id = db.get_study_id_from_name(cfg.study.name)
        url += f"/studies/{study_id}"
    except KeyError:
        log.warning("no such study yet: showing every study", study=cfg.study.name)
    except SQLAlchemyError as exc:
        server.server_close()
        where = storage.redact(cfg.study.storage)
        raise AutotuneError(f"{where} is not an Optuna study database: {exc}") from None
    print(f"optuna-dashboard for study {cfg.study.name!r}: {url}", flush=True)
    print("Ctrl-C stops it.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # the way to stop a dashboard, not an error
    finally:
        server.server_close()
    return 0
