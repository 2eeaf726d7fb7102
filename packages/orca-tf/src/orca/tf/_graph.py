"""The driver side of ``Estimator.from_graph``: check a ``tf.compat.v1`` graph's endpoints and
turn them into a spec of plain data that a worker rebuilds the graph from.

Nothing executable travels: the spec holds the serialized ``MetaGraphDef`` (protobuf bytes),
the names of the tensors and ops a worker feeds and fetches, and the variables' values as
numpy arrays (the Estimator's model state). The user's graph is not modified: it is copied
into a private graph, and the training ops are added to the copy:

- ``flat_grad``: the gradients of ``loss`` with respect to every trainable variable that has
  one, cast to float32 and concatenated (one fetch a step);
- ``grad_in`` → clipping (``clip_value`` then ``clip_norm``, on the all-reduced gradient; fed
  with each step from the Estimator's settings, so the clipping setters need no new graph) →
  ``optimizer.apply_gradients`` → ``apply_op`` (one feed a step);
- an assign op per variable (``set_state``) and one initializer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def tensors(value: Any, arg: str, graph: Any = None, required: bool = True, ops: bool = False) -> list[Any]:
    """``value`` (a graph tensor or a list of them; with ``ops`` also operations) as a list; a
    clear error naming ``arg`` otherwise."""
    if value is None:
        if required:
            raise ValueError(f"{arg} is required: pass a tensor (or a list of tensors) of the tf.compat.v1 graph.")
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"{arg} is an empty list; pass at least one tensor of the graph.")
    for t in items:
        try:
            g = t.graph
        except AttributeError:
            g = None
        is_op = ops and hasattr(t, "node_def")
        if g is None or not (is_op or (hasattr(t, "op") and hasattr(t, "dtype"))):
            raise TypeError(f"{arg} must be tensor(s) of a tf.compat.v1 graph (e.g. a tf.compat.v1.placeholder), "
                            f"got {type(t).__name__}: {t!r:.80}.")
        if graph is not None and g is not graph:
            raise ValueError(f"{arg}: tensor {t.name!r} belongs to another graph than inputs; build every "
                             "endpoint in one tf.Graph.")
    return items


def _shape(t: Any) -> list[int | None]:
    try:
        return list(t.shape.as_list())
    except ValueError:  # unknown rank
        return []


def check_clip(clip_norm: Any, clip_value: Any) -> tuple[float | None, tuple[float, float] | None]:
    """Validate the clipping arguments; ``clip_value`` becomes ``(min, max)``."""
    if clip_norm is not None and (isinstance(clip_norm, bool) or not isinstance(clip_norm, (int, float))
                                  or clip_norm <= 0):
        raise ValueError(f"clip_norm must be a positive number (the largest global L2 norm of the gradients), "
                         f"got {clip_norm!r}.")
    bounds = None
    if clip_value is not None:
        if isinstance(clip_value, (int, float)) and not isinstance(clip_value, bool) and clip_value > 0:
            bounds = (-float(clip_value), float(clip_value))
        elif (isinstance(clip_value, (list, tuple)) and len(clip_value) == 2
              and all(isinstance(v, (int, float)) for v in clip_value) and clip_value[0] < clip_value[1]):
            bounds = (float(clip_value[0]), float(clip_value[1]))
        else:
            raise ValueError(f"clip_value must be a positive number v (clip to [-v, v]) or a (min, max) pair with "
                             f"min < max, got {clip_value!r}.")
    return (None if clip_norm is None else float(clip_norm)), bounds


def split_metrics(metrics: Any, graph: Any) -> tuple[dict[str, Any], Any]:
    """``metrics`` → (graph metric tensors by name, the engine's metrics spec or None).

    A dict value that is a tensor of the graph is a graph metric (a per-batch mean); anything
    else (``"accuracy"``, an orca Metric) is one of orca.core's metrics, computed on the first
    output and the first label.
    """
    if metrics is None:
        return {}, None
    if not isinstance(metrics, Mapping):
        return {}, metrics
    found: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"metrics: keys must be metric names (str), got {name!r}.")
        if isinstance(value, tuple) and len(value) == 2 and hasattr(value[0], "graph"):
            raise TypeError(f"metrics[{name!r}] is a (value, update_op) pair of tf.compat.v1.metrics; pass a "
                            "tensor holding the batch's mean instead (e.g. tf.reduce_mean(tf.cast(tf.equal(...), "
                            "tf.float32))).")
        if hasattr(value, "graph") and hasattr(value, "op"):
            (t,) = tensors(value, f"metrics[{name!r}]", graph)
            if t.shape.rank not in (0, None):
                raise ValueError(f"metrics[{name!r}] must be a scalar tensor (the batch's mean), got shape {t.shape}.")
            found[name] = t
        else:
            engine[name] = value
    return found, (engine or None)


def clip_feed(clip: Mapping[str, Any] | None) -> dict[str, Any]:
    """Values for the clipping placeholders (by name) of the settings ``{"norm", "value"}``;
    the placeholders' defaults leave the gradient as it is."""
    clip = clip or {}
    feed: dict[str, Any] = {}
    if clip.get("value") is not None:
        lo, hi = clip["value"]
        feed.update({"orca_clip/by_value:0": True, "orca_clip/lo:0": lo, "orca_clip/hi:0": hi})
    if clip.get("norm") is not None:
        feed.update({"orca_clip/by_norm:0": True, "orca_clip/norm:0": clip["norm"]})
    return feed


def _clipping(flat: Any) -> Any:
    """``flat`` (the float32 all-reduced gradient) clipped by the fed settings (see :func:`clip_feed`):
    each element to ``[lo, hi]``, then the whole to a global L2 norm, as ``tf.clip_by_global_norm``."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.name_scope("orca_clip/"):
        by_value = v1.placeholder_with_default(False, [], name="by_value")
        lo = v1.placeholder_with_default(np.float32(0), [], name="lo")
        hi = v1.placeholder_with_default(np.float32(0), [], name="hi")
        by_norm = v1.placeholder_with_default(False, [], name="by_norm")
        norm = v1.placeholder_with_default(np.float32(1), [], name="norm")
        flat = tf.cond(by_value, lambda: tf.clip_by_value(flat, lo, hi), lambda: flat)
        return tf.cond(by_norm, lambda: flat * (norm / tf.maximum(tf.norm(flat), norm)), lambda: flat)


def build_spec(*, inputs: Any, outputs: Any, labels: Any, loss: Any, optimizer: Any, metrics: dict[str, Any],
               updates: Any, sess: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Copy the user's graph, add the training ops, and return ``(graph spec, initial variable values)``.

    The arguments are those of ``Estimator.from_graph`` (``metrics`` already the graph metrics).
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    ins = tensors(inputs, "inputs")
    graph = ins[0].graph
    outs = tensors(outputs, "outputs", graph)
    labs = tensors(labels, "labels", graph, required=False)
    (loss_t,) = tensors(loss, "loss", graph) if loss is not None else (None,)
    upd = tensors(updates, "updates", graph, required=False, ops=True) if updates is not None else []
    if optimizer is not None:
        if not isinstance(optimizer, v1.train.Optimizer):
            raise TypeError(f"optimizer must be a tf.compat.v1.train.Optimizer (e.g. "
                            f"tf.compat.v1.train.AdamOptimizer()), got {type(optimizer).__module__}."
                            f"{type(optimizer).__name__}; for a Keras optimizer use Estimator.from_keras.")
        if loss_t is None:
            raise ValueError("optimizer is given but loss is None: pass loss= (a scalar tensor) to train.")
    if loss_t is not None and loss_t.shape.rank not in (0, None):
        raise ValueError(f"loss must be a scalar tensor (the batch's mean loss), got shape {loss_t.shape}.")
    if sess is not None and (not isinstance(sess, v1.Session) or sess.graph is not graph):
        raise ValueError("sess must be a tf.compat.v1.Session on the graph of inputs (its variable values are "
                         f"the starting point), got {type(sess).__name__}.")
    for t in ins + labs:
        if t.op.type != "Placeholder":
            raise ValueError(f"inputs/labels: {t.name!r} is a {t.op.type} op, not a placeholder; the data is fed "
                             "into placeholders (tf.compat.v1.placeholder).")

    with graph.as_default():  # (meta graphs are exported in graph mode only)
        meta = v1.train.export_meta_graph(graph=graph, clear_devices=True)
    g = tf.Graph()
    g.seed = graph.seed
    with g.as_default():
        v1.train.import_meta_graph(meta)

        def here(t: Any) -> Any:
            return g.as_graph_element(t.name)

        variables = g.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
        trainable = g.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES)
        spec: dict[str, Any] = {
            "inputs": [t.name for t in ins], "input_shapes": [_shape(t) for t in ins],
            "outputs": [t.name for t in outs], "labels": [t.name for t in labs],
            "label_shapes": [_shape(t) for t in labs], "loss": None if loss_t is None else loss_t.name,
            "metrics": {k: t.name for k, t in metrics.items()}, "updates": [u.name for u in upd],
            "trainable": [], "flat_grad": None, "grad_in": None, "apply_op": None, "average": [],
        }
        if optimizer is not None:
            pairs = [(gr, v) for gr, v in optimizer.compute_gradients(here(loss_t), var_list=trainable)
                     if gr is not None]
            if not pairs:
                raise ValueError(f"loss {loss_t.name!r} depends on no trainable variable: nothing to train.")
            grads = [tf.convert_to_tensor(gr) for gr, _ in pairs]  # IndexedSlices (embeddings) become dense
            tvars = [v for _, v in pairs]
            sizes = [int(np.prod(v.shape.as_list())) for v in tvars]
            flat = tf.concat([tf.reshape(tf.cast(gr, tf.float32), [-1]) for gr in grads], 0, name="orca_flat_grad")
            grad_in = v1.placeholder(tf.float32, [sum(sizes)], name="orca_grad_in")
            parts = [tf.cast(tf.reshape(p, v.shape), v.dtype.base_dtype)
                     for p, v in zip(tf.split(_clipping(grad_in), sizes), tvars, strict=True)]
            apply_op = optimizer.apply_gradients(list(zip(parts, tvars, strict=True)), name="orca_apply")
            opt_vars = {v.op.name for v in optimizer.variables()}
            variables = g.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
            spec.update(trainable=[v.op.name for v in tvars], flat_grad=flat.name, grad_in=grad_in.name,
                        apply_op=apply_op.name)
            if upd:  # what updates change (moving averages) is averaged over the workers each epoch
                trained = {v.op.name for v in tvars} | opt_vars
                spec["average"] = [v.op.name for v in variables
                                   if v.op.name not in trained and v.dtype.base_dtype.is_floating]
        assign = {}
        for v in variables:
            ph = v1.placeholder(v.dtype.base_dtype, v.shape, name=f"orca_set/{v.op.name}")
            op = v.assign(ph, read_value=False)
            assign[v.op.name] = (ph.name, getattr(op, "op", op).name)
        init = v1.group(v1.global_variables_initializer(), v1.local_variables_initializer(), name="orca_init")
        spec.update(variables=[v.op.name for v in variables], assign=assign, init_op=init.name)
        with v1.Session(graph=g) as private:
            private.run(init)
            if sess is not None:
                _copy_values(sess, graph, private, g, assign)
            values = dict(zip(spec["variables"], private.run(variables), strict=True))
        spec["meta_graph"] = v1.train.export_meta_graph(graph=g, clear_devices=True).SerializeToString()
    return spec, {k: np.asarray(v) for k, v in values.items()}


def _copy_values(user_sess: Any, user_graph: Any, private: Any, g: Any, assign: dict[str, Any]) -> None:
    """Copy the values of the user's session's initialized variables into the private graph."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with user_graph.as_default():
        user_vars = user_graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
        if not user_vars:
            return
        missing = {n.decode() if isinstance(n, bytes) else str(n)
                   for n in user_sess.run(v1.report_uninitialized_variables(user_vars))}
    ready = [v for v in user_vars if v.op.name not in missing and v.op.name in assign]
    values = user_sess.run(ready)
    feed = {g.as_graph_element(assign[v.op.name][0]): val for v, val in zip(ready, values, strict=True)}
    private.run([g.as_graph_element(assign[v.op.name][1]) for v in ready], feed)


def shape_rows(a: np.ndarray, shape: Sequence[int | None] | None) -> np.ndarray:
    """``a`` with flat rows (a DataFrame array column of 64 values) reshaped to the rows of an
    input of static ``shape`` (``(None, 8, 8, 1)``) when the sizes match; otherwise as it is."""
    if not shape or a.ndim < 1:
        return a
    row = list(shape[1:])
    if (list(a.shape[1:]) != row and all(d is not None for d in row)
            and int(np.prod(a.shape[1:], dtype=np.int64)) == int(np.prod(row, dtype=np.int64))):
        return a.reshape([len(a), *row])
    return a


def feed_arrays(arrays: Sequence[np.ndarray], shapes: list[list[int | None]], names: list[str],
                what: str) -> list[np.ndarray]:
    """The batch's arrays shaped for their placeholders: a flat column of 64 values feeds an
    ``(None, 8, 8, 1)`` placeholder; a mismatch names the placeholder and the shapes."""
    if len(arrays) != len(names):
        raise ValueError(f"the graph has {len(names)} {what} placeholder(s) {names} but the data has "
                         f"{len(arrays)} {what} column(s); pass one column per placeholder.")
    out = []
    for a, shape, name in zip(arrays, shapes, names, strict=True):
        a = shape_rows(np.asarray(a), shape)  # also (n, 1) labels for a (None,) placeholder
        if shape and list(a.shape[1:]) != shape[1:] and all(d is not None for d in shape[1:]):
            raise ValueError(f"{what} placeholder {name!r} has shape {shape} but the data's rows have shape "
                             f"{list(a.shape[1:])}.")
        out.append(a)
    return out
