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

Optuna reads both forms (`_get_constraints_from_system_attrs` merges the list as
keys "0", "1", ... with the named keys), so feasibility and `study.best_trial`
are unchanged. TPE ranks infeasible trials by the sum of their violations, which
the list doubles for every trial alike: the ranking, and so TPE, is unchanged as
long as every trial carries both forms (tests/test_dashboard.py checks it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial
from sqlalchemy.exc import SQLAlchemyError

from autotune import objective
from autotune.artifacts import artifact_dir
from autotune.errors import AutotuneError
from autotune.log import get

if TYPE_CHECKING:
    from autotune.config import Config

log = get("autotune.dashboard")

DEFAULT_PORT = 8080
HOST = "127.0.0.1"  # the study DB holds the fleet's configs: never serve it beyond this host

#: The trial system attribute optuna-dashboard 0.21 reads (Optuna's `_CONSTRAINTS_KEY`).
LEGACY_KEY = "constraints"
_KEYED_PREFIX = LEGACY_KEY + ":"
#: The study-detail route of optuna-dashboard 0.21 (`_app.py`), the one the plugin corrects.
STUDY_DETAIL_RULE = "/api/studies/<study_id:int>"


# -- constraints in the form optuna-dashboard reads -----------------------------------
def keyed_constraints(t: FrozenTrial) -> dict[str, float]:
    """A trial's named constraints (`set_constraint`), without the list form's "0", "1", ...

    `FrozenTrial.constraints` returns both forms merged; copying that into
    another trial (a reused result) would turn the list entries into named keys.
    """
    return {
        key[len(_KEYED_PREFIX) :]: float(value)
        for key, value in t.system_attrs.items()
        if key.startswith(_KEYED_PREFIX)
    }


def legacy_list(constraints: Mapping[str, float]) -> list[float]:
    """The values in `objective.CONSTRAINT_KEYS` order, then any other keys by name."""
    known = [k for k in objective.CONSTRAINT_KEYS if k in constraints]
    others = sorted(k for k in constraints if k not in objective.CONSTRAINT_KEYS)
    return [float(constraints[k]) for k in (*known, *others)]


def write_legacy_constraints(
    study: optuna.Study, trial_id: int, constraints: Mapping[str, float]
) -> None:
    """Also store a running trial's constraints as the list optuna-dashboard 0.21 reads.

    Call it with the same values given to `trial.set_constraint`, before
    `study.tell` (a finished trial's attributes cannot change).
    """
    if constraints:
        study._storage.set_trial_system_attr(trial_id, LEGACY_KEY, legacy_list(constraints))


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

        # Here, not at the top: study.py imports this module to record the list form.
        from autotune import study as st

        try:
            name = self.storage.get_study_name_from_id(study_id)
            study = optuna.Study(study_name=name, storage=self.storage)
            trials = {t._trial_id: t for t in study.get_trials(deepcopy=False)}
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


def make_app(storage: BaseStorage, artifacts: Path | None) -> Any:
    """optuna-dashboard's WSGI app on `storage`, serving `artifacts`, with `TruthPlugin`."""
    import optuna_dashboard
    from optuna.artifacts import FileSystemArtifactStore

    store = FileSystemArtifactStore(str(artifacts)) if artifacts is not None else None
    app = optuna_dashboard.wsgi(storage, artifact_store=store)
    app.install(TruthPlugin(storage))
    return app


# -- `autotune dashboard` ------------------------------------------------------------------
def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (None for in-memory or another database)."""
    parsed = urlparse(url)
    if not parsed.scheme.startswith("sqlite") or parsed.path in ("", "/", "/:memory:"):
        return None
    return Path(parsed.path[1:])


def open_storage(url: str) -> RDBStorage:
    """The study DB for reading beside a running daemon: waits for its locks, creates nothing."""
    db = sqlite_file(url)
    engine_kwargs: dict[str, Any] = {}
    if db is not None:
        if not db.is_file():
            raise AutotuneError(f"no study database at {db} (run `autotune start` first)")
        # The daemon may hold the write lock for a moment; wait rather than fail.
        engine_kwargs["connect_args"] = {"timeout": 30}
    try:
        return RDBStorage(
            url,
            engine_kwargs=engine_kwargs,
            skip_compatibility_check=True,
            skip_table_creation=True,
        )
    except Exception as exc:
        raise AutotuneError(f"cannot open storage {url}: {exc}") from None


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open request must not keep Ctrl-C waiting


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the browser polls every few seconds: one line per request drowns the URL


def serve(cfg: Config, port: int = DEFAULT_PORT) -> int:
    """Serve optuna-dashboard for the study on 127.0.0.1:`port` until Ctrl-C; print its URL."""
    storage = open_storage(cfg.study.storage)
    # Served even before the first trial stored its files: the folder appears with them.
    artifacts = artifact_dir(cfg.study.storage).resolve()
    app = make_app(storage, artifacts)
    try:
        server = make_server(
            HOST, port, app, server_class=_ThreadedServer, handler_class=_QuietHandler
        )
    except OSError as exc:
        raise AutotuneError(f"cannot listen on {HOST}:{port}: {exc.strerror}; try --port") from None
    url = f"http://{HOST}:{server.server_port}/dashboard"
    try:
        study_id = storage.get_study_id_from_name(cfg.study.name)
        url += f"/studies/{study_id}"
    except KeyError:
        log.warning("no such study yet: showing every study", study=cfg.study.name)
    except SQLAlchemyError as exc:
        server.server_close()
        raise AutotuneError(f"{cfg.study.storage} is not an Optuna study database: {exc}") from None
    print(f"optuna-dashboard for study {cfg.study.name!r}: {url}", flush=True)
    print("Ctrl-C stops it.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # the way to stop a dashboard, not an error
    finally:
        server.server_close()
    return 0
