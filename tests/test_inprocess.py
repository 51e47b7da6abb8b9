"""The in-process engine behaves like SuperNodes: identities, isolation, error replies."""

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedcal.app.inprocess import run_inprocess

client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    if pid == 2:
        raise RuntimeError("boom")
    msg.content["config"]["tampered"] = 1  # must not leak to the server or other nodes
    seen = int(context.state["seen"]["n"]) + 1 if "seen" in context.state else 1
    context.state["seen"] = MetricRecord({"n": seen})  # node state persists across messages
    return Message(content=RecordDict({"m": MetricRecord({"pid": pid, "seen": seen})}), reply_to=msg)


def test_grid_runs_the_client_app_like_supernodes():
    out = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = list(grid.get_node_ids())
        content = RecordDict({"config": ConfigRecord({"x": 1})})
        for rnd in (1, 2):
            msgs = [Message(content=content, message_type="train", dst_node_id=n) for n in nodes]
            replies = list(grid.send_and_receive(msgs))
            out[rnd] = replies
        out["content"] = content
        out["nodes"] = nodes

    run_inprocess(server, client, num_supernodes=4, seed=0)
    replies = out[2]
    assert len(out["nodes"]) == 4
    errors = [r for r in replies if r.has_error()]
    assert len(errors) == 1 and "boom" in errors[0].error.reason
    good = sorted(int(r.content["m"]["pid"]) for r in replies if not r.has_error())
    assert good == [0, 1, 3]
    assert all(int(r.content["m"]["seen"]) == 2 for r in replies if not r.has_error())
    assert "tampered" not in out["content"]["config"]
    assert {r.metadata.src_node_id for r in replies} == set(out["nodes"])


def test_engines_use_flower_internals_only_through_flower_private():
    """engine.py and inprocess.py import Flower's public modules; the internals they need are
    in fedcal.app.flower_private (one module, each piece explained there), which must import."""
    import ast
    from pathlib import Path

    import fedcal.app.flower_private as private

    public = {"flwr.app", "flwr.serverapp", "flwr.clientapp"}
    app_dir = Path(private.__file__).parent
    for name in ("engine.py", "inprocess.py"):
        tree = ast.parse((app_dir / name).read_text())
        flwr_imports = {node.module for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flwr")}
        flwr_imports |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                         for alias in node.names if alias.name.startswith("flwr")}
        assert flwr_imports <= public, f"{name} imports Flower internals {flwr_imports - public}"
    for name in private.__all__:
        assert getattr(private, name) is not None


def test_pull_messages_takes_flower_1_42s_and_1_43s_argument_names():
    """Flower 1.43 renames ``Grid.pull_messages``'s argument to ``reply_to_message_ids`` (keeping
    ``message_ids`` as a deprecated alias): fedcal's grids take both, positionally too, and the
    wrapping grid hands the ids on."""
    import pytest

    from fedcal.tasks.nodes import WrappedGrid

    out = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = sorted(grid.get_node_ids())
        wrapped = WrappedGrid(grid)

        def push():
            return list(grid.push_messages([Message(content=RecordDict({"config": ConfigRecord({})}),
                                                    message_type="train", dst_node_id=n) for n in nodes[:2]]))

        ids = push()
        out["new"] = len(list(wrapped.pull_messages(reply_to_message_ids=ids)))
        ids = push()
        out["old"] = len(list(wrapped.pull_messages(message_ids=ids[:1]))) + len(list(grid.pull_messages(ids[1:])))
        with pytest.raises(TypeError, match="only one of"):
            grid.pull_messages(ids, message_ids=ids)

    run_inprocess(server, client, num_supernodes=3, seed=0)
    assert out == {"new": 2, "old": 2}
