"""``tf.data.Dataset`` as training data: shipped to the workers as data, read there by rank.

A bare ``tf.data.Dataset`` passed to ``fit``/``evaluate`` travels as its serialized graph (a
GraphDef: the source tensors and the ``map``/``filter`` functions as TF ops) and its element
spec (a ``StructuredValue`` proto), never as pickled Python. A pipeline that calls back into
Python (``py_function``, ``from_generator``) cannot be serialized and is refused on the driver
with the fix (a data creator). Each worker rebuilds the dataset, batches it at its per-worker
batch size and reads batches ``rank, rank + world, ...`` (:func:`dataset_batches`): every row
once, the global batch of a step being consecutive rows, as one process reading it in order.

The graph holds the source data (``from_tensor_slices`` embeds the arrays; file-based sources
hold only paths the workers must reach), and TF caps one GraphDef at 2 GB.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from orca.core.plugin import Batch, CreatorSource, DataSource, get_data_source
from orca.tf.data import Dataset, as_xshards

#: dataset classes whose elements are batches: unbatched before the per-worker batching
_BATCHED = ("_BatchDataset", "_PaddedBatchDataset", "_ParallelBatchDataset")
_FAIL = 2  # ExternalStatePolicy.FAIL: a pipeline with Python callbacks or other state is refused


def is_dataset(data: Any) -> bool:
    """True for a ``tf.data.Dataset`` (without importing TensorFlow)."""
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "element_spec")


def dataset_adapter(data: Any) -> DataSource | None:
    """The data adapter of the TF Estimators: a bare ``tf.data.Dataset`` becomes a creator source,
    an :class:`orca.tf.data.Dataset` the source of the XShards of its mapped rows."""
    if isinstance(data, Dataset):
        return get_data_source(as_xshards(data), need_labels=False)
    return CreatorSource(SerializedDataset.from_dataset(data)) if is_dataset(data) else None


class SerializedDataset:
    """A ``tf.data.Dataset`` as plain data, called on a worker as a data creator
    ``f(config, batch_size)`` that returns it batched at ``batch_size``."""

    def __init__(self, graph_def: bytes, element_spec: bytes) -> None:
        self.graph_def = graph_def
        self.element_spec = element_spec

    @classmethod
    def from_dataset(cls, ds: Any, arg: str = "data") -> SerializedDataset:
        """Serialize ``ds`` (a batched one is unbatched first: ``fit``'s ``batch_size`` batches it).

        Works as well on a dataset built with eager execution disabled (TF1 code under
        ``tf.compat.v1.disable_v2_behavior()``): its size and graph are then read in a session on
        the graph that holds it."""
        import tensorflow as tf
        from tensorflow.python.saved_model import nested_structure_coder

        while type(ds).__name__ == "DatasetV1Adapter":  # tf.compat.v1.data's wrapper of a (v2) dataset
            ds = ds._dataset
        graph = _graph_of(ds)
        with graph.as_default() if graph is not None else contextlib.nullcontext():
            if type(ds).__name__ in _BATCHED:
                ds = ds.unbatch()
            if isinstance(ds.element_spec, dict):
                raise TypeError(f"{arg}: a tf.data.Dataset of dicts is not supported; map it to (features, "
                                "labels) tuples.")
            try:
                cardinality, graph_def = _values(graph, [
                    ds.cardinality(),
                    tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor, external_state_policy=_FAIL,
                                                strip_device_assignment=True)])
            except (tf.errors.FailedPreconditionError, tf.errors.InvalidArgumentError) as exc:
                raise TypeError(f"{arg}: this tf.data.Dataset cannot be shipped to the workers as a graph ("
                                f"{exc.message.strip()}); a pipeline calling Python (py_function, from_generator) "
                                "must be built on each worker: pass a data creator f(config, batch_size) that "
                                "builds and batches it.") from None
        if int(cardinality) == tf.data.INFINITE_CARDINALITY:
            raise ValueError(f"{arg} is an infinite tf.data.Dataset (a repeat() without a count); remove the "
                             "repeat: each epoch reads the dataset once.")
        spec = nested_structure_coder.encode_structure(ds.element_spec).SerializeToString()
        return cls(bytes(graph_def), spec)

    def dataset(self) -> Any:
        """The dataset rebuilt from its graph (unbatched)."""
        import tensorflow as tf
        from tensorflow.core.protobuf import struct_pb2
        from tensorflow.python.saved_model import nested_structure_coder

        spec = nested_structure_coder.decode_proto(struct_pb2.StructuredValue.FromString(self.element_spec))
        variant = tf.raw_ops.DatasetFromGraph(graph_def=self.graph_def)
        return tf.data.experimental.from_variant(variant, structure=spec)

    def __call__(self, config: dict[str, Any], batch_size: int) -> Any:
        return self.dataset().batch(batch_size)


def first_rows(ds: Any, rows: int) -> Any:
    """The first ``rows`` rows of ``ds`` (unbatched first when it is batched), as a dataset."""
    while type(ds).__name__ == "DatasetV1Adapter":
        ds = ds._dataset
    graph = _graph_of(ds)
    with graph.as_default() if graph is not None else contextlib.nullcontext():
        if type(ds).__name__ in _BATCHED:
            ds = ds.unbatch()
        return ds.take(rows)


def _graph_of(ds: Any) -> Any:
    """The ``tf.Graph`` holding ``ds`` (built in graph mode: TF1 code, ``disable_eager_execution``),
    or None for an eager dataset."""
    try:
        return ds._variant_tensor.graph
    except AttributeError:  # an EagerTensor has no graph
        return None


def _values(graph: Any, tensors: list[Any]) -> list[Any]:
    """The values of ``tensors``: eager ones as they are, graph ones run in a session on ``graph``."""
    if graph is None:
        return [t.numpy() for t in tensors]
    import tensorflow as tf

    with tf.compat.v1.Session(graph=graph) as sess:
        return list(sess.run(tensors))


def dataset_batches(ds: Any, world: int, rank: int, steps: int | None) -> Iterator[Batch]:
    """This rank's batches of a batched ``tf.data.Dataset`` of ``(features, labels)``: batches
    ``rank, rank + world, ...`` (none repeated or padded; the engine keeps the ranks in
    lock-step), at most ``steps`` of them."""
    import tensorflow as tf

    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"the data creator returned {type(ds).__name__}; return a batched tf.data.Dataset.")
    if int(ds.cardinality()) == tf.data.INFINITE_CARDINALITY and steps is None:
        raise ValueError("the data creator's dataset is infinite; pass steps_per_epoch (and validation_steps) "
                         "to fit.")
    if world > 1:
        ds = ds.shard(world, rank)
    if steps is not None:
        ds = ds.take(steps)
    for item in ds.as_numpy_iterator():
        if isinstance(item, dict):
            raise TypeError("a dataset of dicts is not supported; yield (features, labels) tuples.")
        items = list(item) if isinstance(item, tuple) else [item]
        x, y = items[0], items[1:2]
        xs = list(x) if isinstance(x, tuple) else [x]
        yield Batch(x=xs, y=[np.asarray(a) for a in y], size=len(xs[0]))
