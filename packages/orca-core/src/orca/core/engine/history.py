"""The result of ``fit``: a list of per-epoch stats that also offers Keras' ``history`` dict."""

from __future__ import annotations

from typing import Any


class History(list):
    """Per-epoch stats of one ``fit`` call.

    It is a list of dicts (``for stats in history: ...``, ``history[-1]["val_loss"]``), and
    ``history.history`` is the same data as a dict of per-epoch lists, as Keras gives it.

    Examples:
        >>> h = History([{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25}])
        >>> h.history["loss"]
        [0.5, 0.25]
    """

    #: each restart of the fit after a lost worker: ``{"epoch", "cause", "restart"}``
    restarts: list[dict[str, Any]]

    def __init__(self, epochs: Any = ()) -> None:
        super().__init__(epochs)
        self.restarts = []

    @property
    def history(self) -> dict[str, list[Any]]:
        """Stats as ``{name: [value per epoch]}``."""
        out: dict[str, list[Any]] = {}
        for epoch in self:
            for key, value in epoch.items():
                out.setdefault(key, []).append(value)
        return out

    @property
    def epoch(self) -> list[int]:
        """Epoch numbers (1-based)."""
        return [e.get("epoch", i + 1) for i, e in enumerate(self)]
