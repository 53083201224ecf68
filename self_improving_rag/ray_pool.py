"""Batch runs on Ray (``sirag batch|eval FILE --ray [ADDRESS]``, ``--workers N``, or ``executor:`` in a batch file).

The questions go to a pool of Ray actors, each holding one engine whose models are loaded once
(:class:`EngineActor`). An actor answers with ``Engine(record=False)`` and returns the
:class:`~self_improving_rag.types.Answer`; the driver (the ``sirag`` process) is the one writer:
it records each answer in memory (:func:`~self_improving_rag.outcome.record_answer`, as
``Engine.ask`` does) and appends its row to ``results.jsonl`` through the batch's own
``ask_row``, so a row and a memory record are made exactly as in a single-process run, and
nothing has to be merged afterwards. Each actor has one question at a time, handed out as the
previous answer is recorded.

An actor that dies (killed, out of memory, its machine gone) loses only the question it held,
which nobody recorded: the question is asked again by a new actor in its place. A question is
tried at most :data:`MAX_TRIES` times, so one that kills every actor stops the run instead of
killing actors for ever. Memory keys a batch's answers by (run, question id), and the driver
keeps one row per id, so nothing is recorded twice. A resumed run is the batch's own resume: the
pool is only handed the questions ``results.jsonl`` does not hold.

Actors read memory (the confidence weights the run is scored with, and the records the policy
chooses strategies from). On the driver's machine they open the driver's store read-only, and
see each answer as soon as it is recorded. An actor on another
machine reads a copy of the store taken when the run started (SQLite cannot be shared over a
network file system), so it chooses from the records as they were then (docs/scale.md).
"""

from __future__ import annotations

import collections
import math
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import BatchError, SiragError

#: How Ray is installed, for the message when it is not.
INSTALL = "pip install -e '.[ray]' (in a checkout of sirag), or pip install 'ray>=2.9'"
#: ``--ray`` given without an address: a local Ray on this machine.
LOCAL = "local"
#: The most times one question is handed to an actor that then dies.
MAX_TRIES = 3


class ExecutorSpec(BaseModel):
    """A batch file's ``executor:``: ``ray`` (a local Ray), or a mapping, e.g.
    ``{kind: ray, address: auto, actors: 8, cpus_per_actor: 2}``; ``local`` is the default
    (this process, or, with ``--workers N``, N actors on a local Ray)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "ray"] = "ray"
    #: A running cluster's address (``auto``, ``HOST:6379``, ``ray://HOST:10001``); None: a local Ray.
    address: str | None = None
    #: How many actors (engines); None: as many as the cluster's CPUs hold (``cpus_per_actor`` each).
    actors: int | None = Field(None, ge=1, le=4096)
    #: CPUs each actor reserves; None: generator.n_threads for a local model, 1 for the openai backend,
    #: and no more than the cluster's CPUs shared among ``actors`` when that is given (see _default_cpus).
    cpus_per_actor: float | None = Field(None, gt=0, le=1024)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value


#: What asked for Ray and how to run without it, for the message when it is not installed.
RAY_OPTION = ("--ray (or executor: ray)", "run without --ray")
WORKERS_OPTION = ("--workers N (N engines, each a Ray actor on this machine)",
                  "run without --workers (one engine, in this process)")


def import_ray(asked_by: tuple[str, str] = RAY_OPTION):
    """The ``ray`` module; BatchError with the install line when it is not installed (``asked_by``:
    the option that needs it, and how to run without it)."""
    try:
        import ray
    except ImportError:
        raise BatchError(f"{asked_by[0]} runs the questions on Ray, which is not installed; install "
                         f"it with {INSTALL}, or {asked_by[1]}") from None
    return ray


def make_executor(ray_address: str | None, workers: int | None, spec: ExecutorSpec | None) -> RayPool | None:
    """The executor of a batch: a :class:`RayPool` when ``--ray`` is given (``ray_address``:
    :data:`LOCAL`, or the address), when the batch file asks for ``executor: ray``, or when
    ``workers`` (``--workers N``) asks for more than one engine (N actors on a local Ray); else
    None (one engine, in this process). ``workers`` is the number of actors. Ray is imported
    here, so that a missing install is said before anything is written."""
    asked_by = RAY_OPTION
    if ray_address is None and workers is not None and workers > 1 and (spec is None or spec.kind != "ray"):
        ray_address, asked_by = LOCAL, WORKERS_OPTION
    if ray_address is not None:
        if _is_batch_file(ray_address):
            raise BatchError(f"--ray took {ray_address} as the Ray cluster's address; put --ray after the batch "
                             "file (sirag eval FILE --ray), or give the address: --ray auto")
        base = spec.model_dump() if spec is not None else {}
        spec = ExecutorSpec(**{**base, "kind": "ray", "address": None if ray_address == LOCAL else ray_address})
    if spec is None or spec.kind != "ray":
        return None
    if workers is not None:
        spec = spec.model_copy(update={"actors": workers})
    import_ray(asked_by)
    return RayPool(spec)


def _is_batch_file(text: str | None) -> bool:
    return text is not None and Path(text).suffix.lower() in (".yaml", ".yml", ".json", ".jsonl") \
        and Path(text).is_file()


def file_before_ray(args) -> None:
    """``sirag batch|eval --ray FILE``: argparse gives FILE to --ray (its address is optional) and
    none to the command's optional file; a batch file there is the file, on a local Ray."""
    if getattr(args, "file", None) is None and _is_batch_file(getattr(args, "ray", None)):
        args.file, args.ray = args.ray, LOCAL


def _connect(ray, address: str | None) -> None:
    if ray.is_initialized():
        return
    try:
        if address is None:
            ray.init(include_dashboard=False)
        else:
            ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        why = " ".join(str(exc).split())[:300]
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise BatchError(f"cannot start or reach {where} ({why}); start the cluster with `ray start --head` on "
                         "its head machine and pass the address it prints (--ray HOST:6379, or --ray auto on "
                         "a machine of the cluster)") from exc


def memory_snapshot(path: str) -> bytes | None:
    """A consistent copy of the memory store at ``path`` (SQLite's online backup), as bytes; None
    when there is no store yet."""
    if not Path(path).is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="sirag-snapshot-") as tmp:
        copy = Path(tmp) / "memory.db"
        src = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        dst = sqlite3.connect(copy)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        finally:
            dst.close()
            src.close()
        return copy.read_bytes()


class EngineActor:
    """One engine in a Ray actor (made a Ray actor class by :meth:`RayPool.run`). It never writes
    memory: it answers and returns the answer (or the error the question met)."""

    def __init__(self, config_json: dict, index_dir: str, fit_id: Any, driver_node: str | None,
                 snapshot: bytes | None) -> None:
        self._args = (config_json, index_dir, fit_id, driver_node, snapshot)
        self.engine = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def start(self) -> BaseException | None:
        """Load the models and warm the engine; the error that stops the run, else None."""
        from .config import config_from_dict
        from .engine import Engine
        from .memory import MemoryStore

        config_json, index_dir, fit_id, driver_node, snapshot = self._args
        try:
            config = config_from_dict(config_json)
            if not Path(index_dir).is_dir():
                raise BatchError(f"the index {index_dir} is not on the machine of a Ray actor ({_node_name()}); "
                                 "every machine of the cluster needs the index at the same path (a copy, or a "
                                 "shared folder: docs/scale.md)")
            db = config.paths.memory_db
            if snapshot is not None and (_node_id() != driver_node or not Path(db).is_file()):
                self._tmp = tempfile.TemporaryDirectory(prefix="sirag-memory-")
                db = str(Path(self._tmp.name) / "memory.db")
                Path(db).write_bytes(snapshot)
            if not Path(db).is_file():  # the driver made it before the run: this is another machine
                raise BatchError(f"the memory store {db} is not on the machine of a Ray actor ({_node_name()}), "
                                 "and no copy of it was sent; run the batch from a machine of the cluster")
            store = MemoryStore(db, read_only=True)
            self.engine = Engine(config, memory=store, index_dir=index_dir, record=False, fit_id=fit_id)
            self.engine.warm_up()
        except SiragError as exc:
            return exc
        return None

    def ask(self, question: str, loop: bool) -> Any:
        """The :class:`Answer` to ``question``, or the SiragError it met (raised again by the driver)."""
        try:
            return self.engine.ask(question, loop=loop)
        except SiragError as exc:
            return exc

    def where(self) -> tuple[str, int]:
        """The actor's machine and process id."""
        return _node_name(), os.getpid()


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 -- outside Ray: no node
        return None


def _node_name() -> str:
    import socket

    return socket.gethostname()


class _Answered:
    """Stands in for the engine in the batch's ``ask_row`` on the driver: ``ask`` records the
    answer an actor gave (or raises the error it met), so the row is made as in a single-process run."""

    def __init__(self, got: Any, memory, threshold: float, corpus: str) -> None:
        self.got, self.memory, self.threshold, self.corpus = got, memory, threshold, corpus

    def ask(self, question: str, *, loop: bool, run_id: str, item_id: str):
        from .outcome import record_answer

        if isinstance(self.got, BaseException):
            raise self.got
        return record_answer(self.memory, self.got, threshold=self.threshold, corpus=self.corpus,
                             run_id=run_id, item_id=item_id)


class RayPool:
    """Asks a run's questions on a pool of Ray actors; the driver records every answer."""

    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec
        #: The live actors by slot, and what the last run did: for tests and the progress notes.
        self.actors: dict[int, Any] = {}
        self.stats: collections.Counter = collections.Counter()
        #: Whether actors read a copy of memory taken at the start: None, only those on another
        #: machine than the driver's (and only on a cluster of several machines); True, every actor.
        self.memory_copy: bool | None = None

    def run(self, todo: list, run_name: str, keep: Callable[[dict], None], config, index_dir: str, loop: bool,
            fit_id: Any) -> None:
        """Ask ``todo`` (QAItems), passing each question's row to ``keep`` as its answer is recorded."""
        from .batch.runner import ask_row
        from .memory import MemoryStore

        ray = import_ray()
        _connect(ray, self.spec.address)
        from ray.exceptions import ObjectLostError, RayActorError, WorkerCrashedError

        died = (RayActorError, WorkerCrashedError, ObjectLostError)
        cpus = self.spec.cpus_per_actor or _default_cpus(config, ray, self.spec.actors)
        n_actors = min(self.spec.actors or _cluster_actors(ray, cpus), len(todo))
        _check_fits(ray, cpus)
        total = ray.cluster_resources().get("CPU", 0)
        if n_actors > total:
            print(f"note: {n_actors} Ray actors share the cluster's {total:g} CPU(s); each loads its own models, so "
                  f"the run is not faster than with {max(1, int(total))} (--workers {max(1, int(total))})",
                  file=sys.stderr)
        elif n_actors > _cluster_actors(ray, cpus):
            print(f"note: {n_actors} Ray actors of {cpus:g} CPU(s) each are more than the cluster's CPUs hold now "
                  f"({_cluster_actors(ray, cpus)}); the others start as CPUs free up or machines join",
                  file=sys.stderr)
        alive_nodes = [n for n in ray.nodes() if n.get("Alive")]
        # A copy of memory only for actors on other machines (a cluster of several nodes).
        # Through Ray's client (ray://) the driver is on no machine of the cluster.
        client = (self.spec.address or os.environ.get("RAY_ADDRESS", "")).startswith("ray://")
        copy = self.memory_copy or client or (self.memory_copy is None and len(alive_nodes) > 1)
        snapshot = memory_snapshot(config.paths.memory_db) if copy else None
        actor_cls = ray.remote(EngineActor)
        driver = _node_id() if not (self.memory_copy or client) else None  # None: no actor is on its machine
        args = (config.model_dump(mode="json"), index_dir, fit_id, driver, snapshot)
        memory = MemoryStore(config.paths.memory_db)
        corpus = str(Path(index_dir).resolve())
        queue = collections.deque(todo)
        tries: collections.Counter = collections.Counter()
        starting: dict = {}  # start() ref -> slot
        running: dict = {}  # ask() ref -> (slot, item)
        idle: list[int] = []
        self.actors, self.stats = {}, collections.Counter()

        def launch(slot: int) -> None:
            self.actors[slot] = actor_cls.options(num_cpus=cpus, max_restarts=0).remote(*args)
            starting[self.actors[slot].start.remote()] = slot
            self.stats["actors_started"] += 1

        def replace(slot: int) -> None:
            ray.kill(self.actors.pop(slot), no_restart=True)
            self.stats["actors_replaced"] += 1
            if self.stats["actors_replaced"] > MAX_TRIES * max(1, n_actors) + len(todo):
                raise BatchError(f"run {run_name}: Ray actors kept dying ({self.stats['actors_replaced']} "
                                 "replaced); see the Ray logs (/tmp/ray/session_latest/logs) for why")
            launch(slot)

        try:
            for slot in range(n_actors):
                launch(slot)
            while queue or running:
                if not starting and not running:
                    raise BatchError(f"run {run_name}: no Ray actor is left to answer {len(queue)} question(s)")
                ready, _ = ray.wait([*starting, *running], num_returns=1)
                ref = ready[0]
                if ref in starting:
                    slot = starting.pop(ref)
                    try:
                        error = ray.get(ref)
                    except died:
                        replace(slot)  # died while loading: its place is taken by another
                        continue
                    if error is not None:
                        raise error  # a missing index or model: the run stops before asking more
                    idle.append(slot)
                else:
                    slot, item = running.pop(ref)
                    try:
                        got = ray.get(ref)
                    except died as exc:
                        tries[item.id] += 1
                        self.stats["asked_again"] += 1
                        if tries[item.id] >= MAX_TRIES:
                            raise BatchError(f"run {run_name}: question {item.id} was being answered by a Ray actor "
                                             f"that died, {tries[item.id]} times ({type(exc).__name__}); the run "
                                             "stops rather than lose more actors to it (the answers so far are "
                                             "kept: run again to resume)") from exc
                        queue.appendleft(item)  # nobody recorded it: asked again
                        replace(slot)
                        continue
                    keep(ask_row(_Answered(got, memory, config.loop.answer_threshold, corpus), item,
                                  run_name, loop))
                    self.stats["answered"] += 1
                    self.stats[f"answered_in_slot_{slot}"] += 1
                    idle.append(slot)
                while idle and queue:
                    slot, item = idle.pop(), queue.popleft()
                    running[self.actors[slot].ask.remote(item.question, loop)] = (slot, item)
            note_actors(self)
        finally:
            for actor in self.actors.values():
                ray.kill(actor, no_restart=True)
            memory.close()


def _default_cpus(config, ray, actors: int | None) -> float:
    """CPUs an actor reserves: the generator's threads when it runs the model itself, 1 when the
    model is on a server (the actor then embeds, searches and scores). When a number of actors is
    asked for (``--workers N``, ``actors:``), no more than the cluster's CPUs shared among them,
    so that all of them run at once (Ray takes a fraction of a CPU, and whole CPUs above one)."""
    own = 1.0 if config.generator.backend in ("openai", "scripted") else float(config.generator.n_threads)
    share = ray.cluster_resources().get("CPU", 0) / actors if actors else 0
    share = float(math.floor(share)) if share >= 1 else math.floor(share * 10_000) / 10_000
    return min(own, share) if share > 0 else own


def _cluster_actors(ray, cpus: float) -> int:
    """As many actors as the cluster's CPUs hold, ``cpus`` each (at least one)."""
    return max(1, int(ray.cluster_resources().get("CPU", 0) // cpus))


def _check_fits(ray, cpus: float) -> None:
    """An actor that asks for more CPUs than any machine has would wait for ever."""
    most = max((n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
    if cpus > most:
        raise BatchError(f"each Ray actor would reserve {cpus:g} CPU(s), more than any machine of the cluster has "
                         f"({most:g}); lower executor: cpus_per_actor (or generator.n_threads)")


def note_actors(pool: RayPool, file=sys.stderr) -> None:
    """Say how the run went on Ray when an actor had to be replaced."""
    s = pool.stats
    if s["actors_replaced"]:
        print(f"note: {s['actors_replaced']} Ray actor(s) died and were replaced; {s['asked_again']} question(s) "
              "they held were asked again (none was recorded twice)", file=file)
