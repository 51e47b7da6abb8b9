"""What fedcal's Grid implementations share across Flower releases."""

from __future__ import annotations

from collections.abc import Iterable


def pulled_ids(reply_to_message_ids: Iterable[str] | None, message_ids: Iterable[str] | None) -> list[str] | None:
    """The ids of ``Grid.pull_messages``: Flower 1.43 names its argument ``reply_to_message_ids`` and
    keeps ``message_ids`` (Flower 1.42's name) as a deprecated alias; at most one of the two, as in
    Flower 1.43 (None: no filter)."""
    if reply_to_message_ids is not None and message_ids is not None:
        raise TypeError("Specify only one of `reply_to_message_ids` and `message_ids`.")
    ids = reply_to_message_ids if message_ids is None else message_ids
    return None if ids is None else list(ids)
