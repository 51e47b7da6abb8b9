"""Where a round's wall time goes on the Ray path (Flower's Simulation Engine).

Runs the round_time.py configuration (paper MNIST–MLP by default) through
``fedcal.app.engine.simulate(engine=ray)`` with time stamps at every hand-over, and prints the
mean per steady round (rounds ≥ 3), in ms:

* server side (this process): ``configure_train``; ``push`` (``Grid.push_messages``: the
  LinkState stores the Messages); ``extractor wait`` (from the end of the push to the first
  Message taken by Flower's Simulation Engine, whose extractor thread polls the LinkState
  every 0.1 s); ``client phase`` (first Message taken → last reply stored in the LinkState);
  ``pull wait`` (last reply stored → ``send_and_receive`` returns: the Grid's poll interval);
  ``aggregate_train``; ``evaluate_fn`` (central evaluation on the test set, metrics logging);
  ``other`` (the rest of ``round_seconds``);
* per Message (summed over the round's Messages, and as the mean per Message): ``queue``
  (taken by the extractor → a worker thread submits it to an idle actor: waiting for an actor),
  ``dispatch`` (submit → the ClientApp starts in the actor: Ray task submission, argument
  transfer and deserialisation), ``handler`` (the ClientApp's handler in the actor), and
  ``return`` (handler end → the worker thread has the reply: result serialisation, transfer,
  ``ray.get``), ``store`` (→ reply stored in the LinkState).

With ``--cprofile`` each actor also runs its handlers under cProfile and the top functions
(cumulative) over all actors are printed. ``--patch-extractor`` replaces Flower's extractor
loop (``vce_api.add_messages_to_queue``, fixed 0.1 s poll) with the same loop woken as soon as
the LinkState stores a Message, in this process only, to measure what the Ray path costs without
that poll (an experiment, not something fedcal does).

    python benchmarks/ray_profile.py --rounds 20 --data-dir ../shared/data [--cprofile]
"""

from __future__ import annotations

import collections
import cProfile
import glob
import io
import json
import os
import pickle
import pstats
import statistics
import tempfile
import threading
import time

from flwr.clientapp import ClientApp as _ClientApp

from round_time import round_config, round_parser  # this folder's round-time setup
from fedcal.results import load_metrics, load_timings

T = time.perf_counter  # CLOCK_MONOTONIC on Linux: comparable across processes


class TimedClientApp(_ClientApp):
    """Runs fedcal's ClientApp, recording (pid, message id, type, start, end) per Message into
    ``out_dir`` (one pickle per actor process, appended); optional cProfile of the handler."""

    def __init__(self, inner: _ClientApp, out_dir: str, profile: bool):
        super().__init__()
        self.inner, self.out_dir, self.profile = inner, out_dir, profile

    def __call__(self, message, context):  # noqa: D102
        t0 = T()
        prof = cProfile.Profile() if self.profile else None
        if prof:
            prof.enable()
        try:
            return self.inner(message=message, context=context)
        finally:
            if prof:
                prof.disable()
            t1 = T()
            rec = (os.getpid(), message.metadata.message_id, message.metadata.message_type, t0, t1)
            with open(os.path.join(self.out_dir, f"actor-{os.getpid()}.pkl"), "ab") as f:
                pickle.dump(rec, f)
            if prof:
                prof.dump_stats(os.path.join(self.out_dir, f"prof-{os.getpid()}-{message.metadata.message_id}"))


def _read_actor_records(out_dir: str) -> dict[str, tuple]:
    recs = {}
    for path in glob.glob(os.path.join(out_dir, "actor-*.pkl")):
        with open(path, "rb") as f:
            while True:
                try:
                    r = pickle.load(f)
                except EOFError:
                    break
                recs[r[1]] = r
    return recs


SERVER_PROFILE = cProfile.Profile()


def _install_probes(ev: dict, patch_extractor: bool):
    """Monkeypatch time stamps into Flower's Simulation Engine and fedcal's strategy (this
    process only)."""
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.serverapp import Grid
    from fedcal.strategies.base import UpdateAggregationStrategy

    lock = threading.Lock()
    cur = {"round": 0}

    def add(key, value):
        with lock:
            ev[cur["round"]][key].append(value)

    def wrap_method(cls, name, key, profile=False):
        orig = getattr(cls, name)

        def w(self, *a, **k):
            t0 = T()
            if profile and cur["round"] >= 3:
                SERVER_PROFILE.enable()
            try:
                return orig(self, *a, **k)
            finally:
                if profile:
                    SERVER_PROFILE.disable()
                add(key, (t0, T()))

        setattr(cls, name, w)

    # strategy phases
    orig_cfg = UpdateAggregationStrategy.configure_train

    def configure_train(self, server_round, *a, **k):
        cur["round"] = server_round
        t0 = T()
        out = orig_cfg(self, server_round, *a, **k)
        add("configure_train", (t0, T()))
        return out

    UpdateAggregationStrategy.configure_train = configure_train
    wrap_method(UpdateAggregationStrategy, "aggregate_train", "aggregate_train", profile=True)
    orig_start = UpdateAggregationStrategy.start

    def start(self, *a, evaluate_fn=None, **k):
        def timed_eval(rnd, arrays):
            t0 = T()
            if rnd >= 3:
                SERVER_PROFILE.enable()
            try:
                return evaluate_fn(rnd, arrays)
            finally:
                SERVER_PROFILE.disable()
                add("evaluate_fn", (t0, T()))
        return orig_start(self, *a, evaluate_fn=timed_eval if evaluate_fn else None, **k)

    UpdateAggregationStrategy.start = start

    # grid: push and send_and_receive of every Grid class the engine may hand the ServerApp
    def wrap_push(cls):
        orig = cls.push_messages

        def push_messages(self, messages):
            messages = list(messages)
            t0 = T()
            try:
                return orig(self, messages)
            finally:
                if messages:  # the (empty) federated-evaluation push is not counted
                    add("push", (t0, T()))

        cls.push_messages = push_messages

    def patch_grid_cls(cls):
        if "push_messages" in cls.__dict__:
            wrap_push(cls)
        if "send_and_receive" in cls.__dict__:
            wrap_method(cls, "send_and_receive", "send_and_receive")
        for sub in cls.__subclasses__():
            patch_grid_cls(sub)

    import fedcal.app.engine  # noqa: F401  (defines fedcal's Grid wrappers, if any)
    from flwr.superlink.grid import InMemoryGrid  # noqa: F401
    patch_grid_cls(Grid)

    # Simulation Engine: per message, taken → submitted → reply
    orig_pm = RayBackend.process_message

    def process_message(self, message, context):
        t0 = T()
        out = orig_pm(self, message, context)
        add("process_message", (message.metadata.message_id, t0, T()))
        return out

    RayBackend.process_message = process_message
    from flwr.simulation.ray_transport.ray_actor import BasicActorPool
    orig_pool_submit = BasicActorPool.submit

    def pool_submit(self, actor_fn, job):
        add("submit", (job[1].metadata.message_id, T()))
        return orig_pool_submit(self, actor_fn, job)

    BasicActorPool.submit = pool_submit

    orig_store_res = InMemoryLinkState.store_message_res

    def store_message_res(self, message):
        out = orig_store_res(self, message)
        add("stored", (message.metadata.reply_to_message_id, T()))
        return out

    InMemoryLinkState.store_message_res = store_message_res

    if patch_extractor:  # Flower's loop, woken when a Message is stored instead of every 0.1 s
        stored = threading.Event()
        orig_store_ins = InMemoryLinkState.store_message_ins

        def store_message_ins(self, message):
            out = orig_store_ins(self, message)
            stored.set()
            return out

        InMemoryLinkState.store_message_ins = store_message_ins

        def add_messages_to_queue(state, queue, nodes_mapping, f_stop):
            while not f_stop.is_set():
                stored.clear()
                for node_id in nodes_mapping.keys():
                    for msg in state.get_message_ins(node_id=node_id, limit=1):
                        queue.put(msg)
                stored.wait(0.1)

        vce_api.add_messages_to_queue = add_messages_to_queue


def _summarise(ev: dict, actors: dict, round_seconds: dict[int, float], first: int) -> list[tuple[str, float]]:
    rows = collections.defaultdict(list)
    for rnd, e in sorted(ev.items()):
        if rnd < first or rnd not in round_seconds:
            continue
        span = lambda k: sum(b - a for a, b in e[k])  # noqa: E731
        push_end = max(b for a, b in e["push"]) if e["push"] else None
        train_pm = [p for p in e["process_message"] if p[0] in actors and actors[p[0]][2] == "train"]
        if not train_pm or push_end is None:
            continue
        sr_end = min(e["send_and_receive"])[1]  # the round's first send_and_receive: the train one
        first_taken = min(p[1] for p in train_pm)
        stored = {m: t for m, t in e["stored"]}
        submit = {m: t for m, t in e["submit"]}
        last_stored = max(stored[p[0]] for p in train_pm)
        rows["configure_train"].append(span("configure_train"))
        rows["push (LinkState stores the Messages)"].append(span("push"))
        rows["extractor wait (0.1 s poll)"].append(first_taken - push_end)
        rows["client phase (first taken → last reply stored)"].append(last_stored - first_taken)
        rows["pull wait (Grid poll)"].append(sr_end - last_stored)
        rows["aggregate_train"].append(span("aggregate_train"))
        rows["evaluate_fn (central eval + logging)"].append(span("evaluate_fn"))
        q = d = h = r = s = 0.0
        for mid, t0, t1 in train_pm:
            _, _, _, a0, a1 = actors[mid]
            q += submit[mid] - t0
            d += a0 - submit[mid]
            h += a1 - a0
            r += t1 - a1
            s += stored[mid] - t1
        n = len(train_pm)
        rows["  per Message, summed: queue (waiting for an actor)"].append(q)
        rows["  per Message, summed: dispatch (Ray submit → handler start)"].append(d)
        rows["  per Message, summed: handler (in the actor)"].append(h)
        rows["  per Message, summed: return (handler end → reply in driver)"].append(r)
        rows["  per Message, summed: store reply in LinkState"].append(s)
        rows["  per Message, mean dispatch + return"].append((d + r) / n)
        rows["  per Message, mean handler"].append(h / n)
        rows["round_seconds (as logged)"].append(round_seconds[rnd])
    out = [(k, 1e3 * statistics.mean(v)) for k, v in rows.items()]
    phases = [k for k, _ in out if not k.startswith(" ") and not k.startswith("round_seconds")]
    other = 1e3 * statistics.mean(rows["round_seconds (as logged)"]) - sum(v for k, v in out if k in phases)
    out.insert(len(phases), ("other (rest of round_seconds)", other))
    return out


def main() -> None:
    ap = round_parser(__doc__)
    ap.add_argument("--cprofile", action="store_true", help="cProfile the handlers in the actors")
    ap.add_argument("--patch-extractor", action="store_true",
                    help="experiment: Flower's extractor is woken by each stored Message instead of polling every 0.1 s")
    ap.add_argument("--backend", default="", metavar="JSON",
                    help='experiment: merged into fedcal\'s backend_config, e.g. \'{"init_args": {"num_cpus": 5}}\'')
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    import fedcal.app.client as client_mod
    import fedcal.app.engine as engine_mod
    from fedcal.app.engine import simulate

    if args.backend:
        extra, base_fn = json.loads(args.backend), engine_mod.backend_config

        def merged(cfg):
            out = base_fn(cfg)
            for k, v in extra.items():
                out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
            print("backend_config:", out)
            return out

        engine_mod.backend_config = merged

    ev: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    _install_probes(ev, args.patch_extractor)
    with tempfile.TemporaryDirectory() as tmp:
        actor_dir = os.path.join(tmp, "actors")
        os.makedirs(actor_dir)
        client_mod.app = TimedClientApp(client_mod.app, actor_dir, args.cprofile)
        cfg = round_config(args, f"{tmp}/out", engine="ray")
        t0 = T()
        run_dir = simulate(cfg, progress=False)
        total = T() - t0
        df = load_metrics(run_dir)
        timings = load_timings(run_dir)
        rs = timings[timings.metric == "round_seconds"].set_index("round")["value"].to_dict()
        acc = df[(df.metric == "accuracy") & (df["round"] == args.rounds)]["value"].item()
        actors = _read_actor_records(actor_dir)
        stats = None
        if args.cprofile:  # the handlers of steady rounds only
            steady = {p[0] for rnd, e in ev.items() if rnd >= 3 for p in e["process_message"]}
            profs = [p for p in glob.glob(os.path.join(actor_dir, "prof-*"))
                     if os.path.basename(p).split("-", 2)[2] in steady]
            stats = pstats.Stats(profs[0])
            for p in profs[1:]:
                stats.add(p)

    print(f"{args.dataset}-{args.model}, K={cfg.num_clients} M={cfg.clients_per_round}, {args.rounds} rounds, "
          f"Ray path{' (extractor patched: woken per Message)' if args.patch_extractor else ''}; total {total:.1f} s, "
          f"final accuracy {acc:.6f}; {len({a[0] for a in actors.values()})} actor processes")
    print(f"{'ms per steady round (rounds ≥ 3)':<66}{'ms':>8}")
    for k, v in _summarise(ev, actors, rs, first=3):
        print(f"{k:<66}{v:>8.1f}")
    steady_ms = sorted(round(1e3 * v) for r, v in rs.items() if r >= 3)
    print(f"round_seconds of the steady rounds, sorted (ms): {steady_ms}")
    if args.cprofile:
        s = io.StringIO()
        pstats.Stats(SERVER_PROFILE, stream=s).sort_stats("cumulative").print_stats(args.top)
        lines = s.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "function calls" in line)
        print("\ncProfile of aggregate_train and evaluate_fn in the ServerApp (rounds ≥ 3):")
        print("\n".join(line for line in lines[start:] if line.strip()))
    if stats is not None:
        s = io.StringIO()
        stats.stream = s
        stats.sort_stats("cumulative").print_stats(args.top)
        print(f"\ncProfile of the handlers in the actors ({len(profs)} Messages of rounds ≥ 3):")
        lines = s.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "function calls" in line)
        print("\n".join(line for line in lines[start:] if line.strip()))


if __name__ == "__main__":
    main()
