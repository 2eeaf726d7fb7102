"""``orca.tf.data.Dataset``: ``tf.data``-style transformations over an XShards.

The reference's ``bigdl.orca.data.tf.data.Dataset``: a user turns an XShards into a dataset
whose elements are its rows (``Dataset.from_tensor_slices(shards)``), transforms them with
``tf.data`` functions (``.map(fn)``) and passes the result to the Keras Estimator's ``fit``,
``evaluate`` and ``predict`` (and to the graph Estimator's). Nothing moves to the driver: each
shard is turned, where it lives, into ``tf.data.Dataset.from_tensor_slices(shard).map(...)`` and
read back as numpy arrays, so the Estimators train on exactly the XShards of the mapped rows
(:func:`as_xshards`) and the map functions run on the executors (TensorFlow must be importable
there, as the workers need it anyway).

Before an Estimator uses a dataset, the map functions run once on the driver over the first row
of the first shard: a map function that raises does so on the driver, with its own exception,
and an element the Estimators cannot read (a dict without an ``"x"`` key, a features dict) is
refused there with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from orca.core import XShards

__all__ = ["Dataset"]


class Dataset:
    """A distributed dataset of an XShards' rows, transformed as a ``tf.data.Dataset`` is.

    Build one with :meth:`from_tensor_slices`; :meth:`map` returns a new dataset; the Keras
    Estimator (``orca.tf.Estimator.from_keras``) takes one as ``data``/``validation_data`` of
    ``fit`` and as ``data`` of ``evaluate`` and ``predict``, and trains exactly what it trains
    from :meth:`get_xshards`'s XShards of the mapped rows.

    Examples:
        >>> shards = XShards.partition({"x": x, "y": y}, num_shards=4)  # doctest: +SKIP
        >>> ds = Dataset.from_tensor_slices(shards).map(lambda e: (e["x"] / 255.0, e["y"]))  # doctest: +SKIP
        >>> est.fit(ds, epochs=2, batch_size=64)  # doctest: +SKIP
        >>> est.predict(ds).collect()[0]["prediction"]  # doctest: +SKIP
    """

    def __init__(self, xshards: XShards, maps: tuple[Callable[..., Any], ...] = ()) -> None:
        """Use :meth:`from_tensor_slices`; this holds the XShards and the map functions, in order."""
        self.xshards = xshards
        self.maps = tuple(maps)

    @staticmethod
    def from_tensor_slices(xshards: XShards) -> Dataset:
        """A dataset whose elements are the rows of ``xshards``' shards.

        Args:
            xshards: an Orca XShards (:class:`orca.core.data.XShards`, of any form) whose shards
                are what ``tf.data.Dataset.from_tensor_slices`` slices: an ndarray, or a dict or
                tuple (nested) of ndarrays with the same number of rows (a list is read as a
                tuple); a pandas DataFrame shard is sliced as the dict of its columns.

        Returns:
            The dataset. Nothing is computed yet.

        Raises:
            TypeError: ``xshards`` is not an XShards.
        """
        if not isinstance(xshards, XShards):
            raise TypeError(
                f"Dataset.from_tensor_slices takes an orca XShards, got {type(xshards).__name__}; build one "
                "with orca.core.data.XShards.partition(data) (or read_csv / read_parquet), or pass in-memory "
                "arrays to the Estimator as they are (a tf.data.Dataset.from_tensor_slices of them works too).")
        return Dataset(xshards)

    def map(self, map_func: Callable[..., Any]) -> Dataset:
        """A dataset of ``map_func`` applied to every element, as ``tf.data.Dataset.map`` applies it.

        Args:
            map_func: called (traced, as ``tf.data`` does) with an element's tensors: a dict
                element as one dict argument, a tuple element unpacked into its parts. For an
                Estimator it returns ``(features, labels)`` (``features`` a tensor or a tuple of
                them in the model's input order), ``features`` alone (to predict), or a dict
                ``{"x": features, "y": labels}``.

        Returns:
            A new dataset; this one is unchanged.

        Raises:
            TypeError: ``map_func`` is not callable.
        """
        if not callable(map_func):
            raise TypeError(f"Dataset.map takes a function of an element, got {type(map_func).__name__}.")
        return Dataset(self.xshards, (*self.maps, map_func))

    def get_xshards(self) -> XShards:
        """The XShards this dataset holds: each shard's mapped rows as numpy arrays.

        A shard keeps its rows; its structure becomes that of the elements (a tuple of arrays for
        ``(features, labels)`` elements, a dict of arrays for dict ones). Without a map, the
        XShards given to :meth:`from_tensor_slices`. Computed lazily, where the shards live.

        Returns:
            An XShards of the same form and partitions.
        """
        if not self.maps:
            return self.xshards
        return self.xshards.transform_shard(_mapped, self.maps)

    def __repr__(self) -> str:
        names = ", ".join(getattr(f, "__name__", type(f).__name__) for f in self.maps)
        return f"Dataset({type(self.xshards).__name__}, maps=[{names}])"


def as_xshards(data: Any, arg: str = "data") -> Any:
    """``data`` as the Estimators read it: a :class:`Dataset` becomes the XShards of its mapped
    rows as ``{"x": features, "y": labels}`` dicts (``{"x": features}`` without labels); anything
    else is returned as it is.

    The map functions first run on the driver over the first row of the first shard, so a failing
    map function raises here, with its own exception.

    Args:
        data: what the user passed.
        arg: the argument's name, for messages (``data``, ``validation_data``).

    Returns:
        The XShards (lazy: the maps run where the shards live when it is read), or ``data``.

    Raises:
        ValueError: the dataset's XShards has no shards.
        TypeError: its elements are not ``(features, labels)``, ``features`` or ``{"x", "y"}``
            dicts (the message names the fix).
    """
    if not isinstance(data, Dataset):
        return data
    try:
        first = data.xshards._first_map(_first_row)
    except IndexError:
        raise ValueError(f"{arg} is a Dataset over an empty XShards (no shards); build it from an XShards "
                         "with at least one shard of rows.") from None
    _check_element(_mapped(first, data.maps), arg)
    return data.xshards.transform_shard(_rows_as_xy, data.maps)


def _slices(shard: Any) -> Any:
    """A shard as ``tf.data.Dataset.from_tensor_slices`` slices it: lists as tuples (tf.data would
    stack a list into one tensor), a pandas DataFrame as the dict of its columns."""
    if isinstance(shard, pd.DataFrame):
        return {str(c): shard[c].to_numpy() for c in shard.columns}
    if isinstance(shard, pd.Series):
        return shard.to_numpy()
    if isinstance(shard, dict):
        return {k: _slices(v) for k, v in shard.items()}
    if isinstance(shard, (tuple, list)):
        return tuple(_slices(v) for v in shard)
    return shard


def _first_row(shard: Any) -> Any:
    """The first row of a shard (no rows for an empty one), structure kept."""
    def head(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: head(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return tuple(head(v) for v in value)
        return np.asarray(value)[:1]

    return head(_slices(shard))


def _mapped(shard: Any, maps: tuple[Callable[..., Any], ...]) -> Any:
    """A shard's rows through ``from_tensor_slices(...).map(f)...`` and back as numpy arrays."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    slices = _slices(shard)
    leaves = tf.nest.flatten(slices)
    rows = len(leaves[0]) if leaves else 0
    with context.eager_mode():  # also in a process running TF1 code (eager execution off)
        ds = tf.data.Dataset.from_tensor_slices(slices)
        for fn in maps:
            ds = ds.map(fn)
        if rows == 0:
            return tf.nest.map_structure(
                lambda spec: np.zeros((0, *(d or 0 for d in spec.shape)), spec.dtype.as_numpy_dtype),
                ds.element_spec)
        return tf.nest.map_structure(lambda t: t.numpy(), ds.batch(rows).get_single_element())


def _check_element(element: Any, arg: str) -> None:
    """Raise TypeError unless the Estimators can read ``element`` (a mapped row) as features and labels."""
    fix = ("map the elements to (features, labels) tuples, e.g. .map(lambda e: (e['x'], e['y'])), or to "
           "{'x': features, 'y': labels} dicts")
    if isinstance(element, dict):
        if "x" not in element:
            raise TypeError(f"{arg}: the Dataset's elements are dicts with keys {sorted(map(str, element))} and "
                            f"no 'x' key; {fix}.")
        features = element["x"]
    elif isinstance(element, tuple):
        if len(element) > 2:
            raise TypeError(f"{arg}: the Dataset's elements are tuples of {len(element)} parts; the Estimators "
                            f"take (features, labels) (sample weights are not supported): {fix}.")
        features = element[0] if element else None
    else:
        features = element
    if isinstance(features, dict):
        raise TypeError(f"{arg}: the Dataset's features are a dict (keys {sorted(map(str, features))}); give "
                        "them as a tuple of tensors in the model's input order, e.g. .map(lambda e: ((e['a'], "
                        "e['b']), e['label'])).")


def _rows_as_xy(shard: Any, maps: tuple[Callable[..., Any], ...]) -> dict[str, Any]:
    """A shard's mapped rows as the Estimators' ``{"x": features, "y": labels}`` dict."""
    shard = _mapped(shard, maps) if maps else _slices(shard)
    if isinstance(shard, dict):
        return shard
    if isinstance(shard, tuple):
        return {"x": shard[0]} if len(shard) == 1 else {"x": shard[0], "y": shard[1]}
    return {"x": shard}
