"""A toy task defined outside ``fedcal/`` (tests/test_plugin_task.py runs it): its config group,
its server side, its client side, its report, and its one declaration. The marked region is
docs/design.md's worked example ("Adding a task"), pasted there by
``python -m fedcal.pages include_tables docs/design.md``."""

from __future__ import annotations

# --- example: a plug-in task ---
from flwr.app import Message, MetricRecord, RecordDict

from fedcal.config import RunConfig, Task, check, group, register_task, setting
from fedcal.results import RunStore, load_metrics, run_dir_for
from fedcal.tasks.nodes import client_id, config_record, discover_clients, message_config


# 1. The config group: its fields (flat kebab-case keys: toy-rounds, toy-scale) and its own rules.
def _scale_below_rounds(cfg: RunConfig) -> None:
    check("toy-scale", cfg.toy_scale <= 100 * cfg.toy_rounds, cfg.toy_scale, "must be <= 100 * toy-rounds")


@group("toy", "a toy task: each client answers its id times a scale, the server logs the mean")
class Toy:
    toy_rounds: int = setting(2, "rounds of the toy task", ge=1)
    toy_scale: float = setting(1.0, "what each client multiplies its id by", gt=0, finite=True)


MESSAGE_TYPE = "query.toy"


# 2. The server side, on a Flower Grid: ask every client each round, log the mean answer.
def run_toy(grid, cfg: RunConfig, progress=None) -> None:
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.toy_rounds):
        nodes = discover_clients(grid, cfg.num_clients)
        for server_round in range(cfg.toy_rounds + 1):
            replies = grid.send_and_receive([
                Message(RecordDict({"config": config_record(cfg)}), dst_node_id=node, message_type=MESSAGE_TYPE)
                for node in nodes])
            answers = [r.content["metrics"]["answer"] for r in replies if r.has_content()]
            store.log_round(server_round, {"mean": sum(answers) / len(answers)})
            if progress is not None:
                progress(server_round, {})
        store.finish()


# 3. The client side: a ClientApp handler for the task's message type.
def answer(msg: Message, context) -> Message:
    cfg, _ = message_config(msg, context)
    return Message(RecordDict({"metrics": MetricRecord({"answer": client_id(context) * cfg.toy_scale})}),
                   reply_to=msg)


# 4. The report: a table from finished run directories (the run store only).
def toy_report(run_dirs, out_dir, title: str = "") -> str:
    frame = load_metrics(list(run_dirs))
    last = frame.groupby("run_id")["value"].last()
    return (f"## {title}\n\n" if title else "") + "\n".join(f"{run}: mean {v:g}" for run, v in last.items())


# 5. The task, declared once: its config facts (the groups it reads: its run hash is common + toy + the
#    task key; the rules that hold for it only; its run-directory name) and, by name, its server side,
#    its client handlers by message type and its report.
TASK = register_task(Task(
    "toy", f"{__name__}:run_toy", summary="a toy task", groups=("toy",), rules=(_scale_below_rounds,),
    run_name=lambda cfg, h: f"toy-x{cfg.toy_scale:g}-s{cfg.seed}-{h}", handlers={MESSAGE_TYPE: f"{__name__}:answer"},
    rounds=lambda cfg: cfg.toy_rounds, report=f"{__name__}:toy_report"))
# --- end of example ---
