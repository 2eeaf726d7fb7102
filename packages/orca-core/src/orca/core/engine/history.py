"""The result of ``fit``: a list of per-epoch stats that also offers Keras' ``history`` dict."""

from __future__ import annotations

from typing import Any


class History(list):
    """Per-epoch stats of one ``fit`` call.

    It is a list of dicts (``for stats in history: ...``, ``history[-1]["val_loss"]``), and
    ``history.history`` is the same data as a dict of per-epoch lists, as Keras gives it. A
    name also indexes it as that dict, merged with ``params`` (Keras' ``History.params``), which
    is what the reference's TF2 ``fit`` returned: ``history["loss"]`` is the per-epoch list,
    ``history["epochs"]`` a parameter of the fit.

    Examples:
        >>> h = History([{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25}])
        >>> h.history["loss"]
        [0.5, 0.25]
        >>> h["loss"], "loss" in h, h[-1]["loss"]
        ([0.5, 0.25], True, 0.25)
    """

    #: each restart of the fit after a lost worker: ``{"epoch", "cause", "restart"}``
    restarts: list[dict[str, Any]]
    #: the fit's parameters where the framework reports them (Keras': ``epochs``, ``steps``, ``verbose``)
    params: dict[str, Any]

    def __init__(self, epochs: Any = ()) -> None:
        super().__init__(epochs)
        self.restarts = []
        self.params = {}

    @property
    def history(self) -> dict[str, list[Any]]:
        """Stats as ``{name: [value per epoch]}``."""
        out: dict[str, list[Any]] = {}
        for epoch in self:
            for key, value in (epoch.items() if isinstance(epoch, dict) else ()):  # (per-worker lists: none)
                out.setdefault(key, []).append(value)
        return out

    @property
    def epoch(self) -> list[int]:
        """Epoch numbers (1-based)."""
        return [e.get("epoch", i + 1) for i, e in enumerate(self)]

    def as_dict(self) -> dict[str, Any]:
        """``params`` and ``history`` in one dict: the reference's TF2 ``fit`` result."""
        return {**self.params, **self.history}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            stats = self.as_dict()
            if key not in stats:
                raise KeyError(f"{key!r}: the History has {sorted(stats)}")
            return stats[key]
        return super().__getitem__(key)

    def __contains__(self, item: Any) -> bool:
        return item in self.as_dict() if isinstance(item, str) else super().__contains__(item)

    def keys(self) -> list[str]:
        """The names ``history[name]`` takes (``params`` and per-epoch stats)."""
        return list(self.as_dict())

    def items(self) -> list[tuple[str, Any]]:
        """``(name, history[name])`` pairs, as a dict's."""
        return list(self.as_dict().items())

    def get(self, key: str, default: Any = None) -> Any:
        """``history[key]``, or ``default`` when it has no such name."""
        return self.as_dict().get(key, default)
