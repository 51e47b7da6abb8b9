"""How a strategy's messages name a node: by Flower's node id and, where the caller gave a
``node_label`` (node id -> partition id), by its partition too; without one, said once per
strategy that node ids are drawn anew every run."""

from __future__ import annotations

from logging import INFO
from typing import Any

from flwr.supercore import log


class NodeNaming:
    """Mixin of :class:`fedcal.strategies.base.UpdateAggregationStrategy` (and kin): needs
    ``node_label`` (a callable or None) and ``_said_unlabelled`` set by the strategy."""

    node_label: Any = None
    _said_unlabelled: bool = False

    def label(self, node_id: int) -> Any:
        """The client's partition id (or name) of ``node_id`` from ``node_label``, else None."""
        if self.node_label is None:
            return None
        try:
            return self.node_label(node_id)
        except Exception:  # noqa: BLE001 — a label is for messages only
            return None

    def who(self, node_id: int) -> str:
        """``node <id> (partition <label>)``: how every message names a node; ``node <id>`` when no
        label is known (said once per strategy, by :meth:`_note_unlabelled`)."""
        label = self.label(node_id)
        if label is None:
            self._note_unlabelled()
            return f"node {node_id}"
        return f"node {node_id} (partition {label})"

    def by_node(self, values: dict[int, float], digits: int = 3) -> dict[str, float]:
        """``{node: value}`` keyed ``"<node id>/p<partition>"`` for the strategies' INFO logs
        (``"<node id>"`` for a node without a label)."""
        out = {}
        for n, v in values.items():
            label = self.label(n)
            if label is None:
                self._note_unlabelled()
            out[str(n) if label is None else f"{n}/p{label}"] = round(float(v), digits)
        return out

    def _note_unlabelled(self) -> None:
        """Say once that nodes are named by Flower's node ids (drawn anew each run)."""
        if not self._said_unlabelled:
            self._said_unlabelled = True
            log(INFO, "%s names nodes by Flower's node id (drawn anew every run): pass node_label=<node id -> "
                "partition id> to name them by partition", type(self).__name__)
