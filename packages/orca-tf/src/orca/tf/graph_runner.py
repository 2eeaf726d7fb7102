"""GraphRunner: one worker's ``tf.compat.v1`` graph and session (``Estimator.from_graph``).

The worker imports the MetaGraph the driver serialized (:mod:`orca.tf._graph`) into a graph of
its own and runs it in a ``tf.compat.v1.Session``. A training step is two session runs around
one all-reduce, the parameter-sync of the torch and TF ``bigdl`` backends:

1. fetch ``loss``, the flat float32 gradient of ``loss`` on the local batch, the graph metrics
   and the ``updates`` ops;
2. scale the gradient by the batch's share of the global batch (``Batch.weight``) and
   all-reduce it (mean) over the workers with :mod:`orca.core.sync` — a worker without rows
   in this step contributes zeros;
3. feed the result to the clipping and the user's ``optimizer.apply_gradients``.

So every replica applies exactly the global batch's gradient, and the replicas stay
bit-identical. Graph metrics (scalar tensors holding a batch's mean) are merged exactly: each
worker sums ``value * rows``, the driver divides the sum of the sums by all the rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from orca.core.plugin import Batch, Rendezvous, Runner
from orca.tf._dataset import dataset_batches
from orca.tf._graph import clip_feed, feed_arrays


class GraphRunner(Runner):
    """Runs a serialized ``tf.compat.v1`` graph in one Orca worker (see the module doc)."""

    can_skip_steps = True

    def setup(self, rendezvous: Rendezvous) -> None:
        super().setup(rendezvous)
        import tensorflow as tf

        v1 = tf.compat.v1
        g = self.spec["graph"]
        self.names = g
        self.tf_graph = tf.Graph()
        with self.tf_graph.as_default():
            meta = v1.MetaGraphDef.FromString(g["meta_graph"])
            v1.train.import_meta_graph(meta)
            if self.spec.get("seed") is not None:
                self.tf_graph.seed = int(self.spec["seed"])
        el = self.tf_graph.as_graph_element
        self.inputs = [el(n) for n in g["inputs"]]
        self.outputs = [el(n) for n in g["outputs"]]
        self.labels = [el(n) for n in g["labels"]]
        self.loss = el(g["loss"]) if g["loss"] else None
        self.metric_names = list(g["metrics"])
        self.metric_tensors = [el(n) for n in g["metrics"].values()]
        self.updates = [el(n) for n in g["updates"]]
        self.flat_grad = el(g["flat_grad"]) if g["flat_grad"] else None
        self.grad_in = el(g["grad_in"]) if g["grad_in"] else None
        self.apply_op = el(g["apply_op"]) if g["apply_op"] else None
        self.grad_size = int(self.grad_in.shape[0]) if self.grad_in is not None else 0
        self.clip_feed = {el(name): value for name, value in clip_feed(self.spec.get("clip")).items()}
        by_name = {v.op.name: v for v in self.tf_graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)}
        self.variables = [by_name[n] for n in g["variables"]]
        self.assign = {n: (el(ph), el(op)) for n, (ph, op) in g["assign"].items()}
        config = v1.ConfigProto(intra_op_parallelism_threads=self.threads, inter_op_parallelism_threads=2)
        self.sess = v1.Session(graph=self.tf_graph, config=config)
        self.sess.run(el(g["init_op"]))
        self._sums = np.zeros(len(self.metric_tensors))
        self._rows = 0

    def shutdown(self) -> None:
        sess = getattr(self, "sess", None)
        if sess is not None:
            sess.close()
            self.sess = None
        super().shutdown()

    # ------------------------------------------------------------ feeding
    def _feed(self, batch: Batch, labels: bool) -> dict[Any, np.ndarray]:
        g = self.names
        xs = feed_arrays(batch.x, g["input_shapes"], g["inputs"], "input")
        feed = dict(zip(self.inputs, xs, strict=True))
        if labels:
            if not self.labels:
                raise ValueError("the graph has no labels placeholder: pass labels= to Estimator.from_graph to "
                                 "fit or evaluate.")
            ys = feed_arrays(batch.y, g["label_shapes"], g["labels"], "label")
            feed.update(zip(self.labels, ys, strict=True))
        return feed

    def _count_metrics(self, values: list[Any], rows: int) -> None:
        if self.metric_tensors:
            self._sums += np.asarray(values, np.float64) * rows
            self._rows += rows

    # ------------------------------------------------------------ steps
    def train_batch(self, batch: Batch, skip_non_finite: bool = False) -> float | None:
        if self.apply_op is None:
            raise ValueError("the graph has no optimizer (or no loss): pass loss= and optimizer= (a "
                             "tf.compat.v1.train.Optimizer) to Estimator.from_graph to fit.")
        value = 0.0
        if batch.size > 0:
            out = self.sess.run([self.loss, self.flat_grad, self.metric_tensors, self.updates],
                                self._feed(batch, labels=True))
            value = float(out[0])
            flat = np.array(out[1], dtype=np.float32)  # writable: the sync layer reduces it in place
            if batch.weight != 1.0:
                flat *= np.float32(batch.weight)
            self._count_metrics(out[2], batch.size)
        else:  # no rows in this step: the all-reduce still needs this rank's (zero) share
            flat = np.zeros(self.grad_size, np.float32)
        self.allreduce_mean_(flat)
        if skip_non_finite and not np.isfinite(flat).all():
            return None  # the same reduced gradient on every rank: every rank skips this step
        self.sess.run(self.apply_op, {self.grad_in: flat, **self.clip_feed})
        return value

    def eval_batch(self, batch: Batch) -> tuple[float, list[np.ndarray]]:
        fetches = [self.outputs, self.metric_tensors, self.loss if self.loss is not None else []]
        outs, metrics, loss = self.sess.run(fetches, self._feed(batch, labels=True))
        self._count_metrics(metrics, batch.size)
        return (float(loss) if self.loss is not None else float("nan")), [np.asarray(o) for o in outs]

    def predict_batch(self, batch: Batch) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.sess.run(self.outputs, self._feed(batch, labels=False))]

    def native_batches(self, creator: Any, batch_size: int, training: bool,
                       steps: int | None = None) -> Iterator[Batch]:
        """This rank's batches of the creator's batched ``tf.data.Dataset`` (see
        :func:`orca.tf._dataset.dataset_batches`)."""
        return dataset_batches(creator(self.config, batch_size), self.world, self.rank, steps)

    def on_epoch_end(self, epoch: int) -> None:
        """Average what ``updates`` changed (moving statistics) over the workers."""
        names = self.names["average"]
        if self.group is None or not names:
            return
        state = self.get_state()
        from orca.core.plugin import pack, unpack

        arrays = [state[n] for n in names]
        flat = pack(arrays)
        self.allreduce_mean_(flat)
        self.set_state(dict(zip(names, unpack(flat, arrays), strict=True)))

    # ------------------------------------------------------------ metrics
    def metric_states(self) -> Any:
        if not self.metric_tensors:
            return None
        state = {"rows": self._rows, "sums": [float(s) for s in self._sums]}
        self._sums[:] = 0.0
        self._rows = 0
        return state

    def merge_metric_states(self, states: list[Any]) -> dict[str, float]:
        live = [s for s in states if s and s["rows"]]
        if not live:
            return {}
        rows = sum(s["rows"] for s in live)
        names = list(self.spec["graph"]["metrics"])
        return {n: float(sum(s["sums"][i] for s in live) / rows) for i, n in enumerate(names)}

    # ------------------------------------------------------------ state
    def weights(self) -> list[np.ndarray]:
        state = self.get_state()
        return [state[n] for n in self.names["trainable"] or self.names["variables"]]

    def get_state(self) -> dict[str, Any]:
        """``{variable name: value}`` of every global variable (model and optimizer)."""
        values = self.sess.run(self.variables)
        return {v.op.name: np.asarray(val) for v, val in zip(self.variables, values, strict=True)}

    def set_state(self, state: dict[str, Any]) -> None:
        unknown = sorted(set(state) - set(self.assign))
        if unknown:
            raise ValueError(f"the state names variables the graph does not have: {unknown[:5]}.")
        ops = [self.assign[n][1] for n in state]
        self.sess.run(ops, {self.assign[n][0]: np.asarray(v) for n, v in state.items()})

    def export_saved_model(self, export_dir: str) -> None:
        """Write a SavedModel (TF1 format, tag ``serve``) with a ``serving_default`` signature from
        the graph's inputs to its outputs, keyed by their op names, to the new directory ``export_dir``."""
        import tensorflow as tf

        v1 = tf.compat.v1
        with self.tf_graph.as_default():
            signature = v1.saved_model.predict_signature_def(
                inputs={t.op.name: t for t in self.inputs}, outputs={t.op.name: t for t in self.outputs})
            builder = v1.saved_model.Builder(export_dir)
            builder.add_meta_graph_and_variables(self.sess, [v1.saved_model.SERVING], strip_default_attrs=True,
                                                 signature_def_map={"serving_default": signature})
            builder.save()

    def save_tf_checkpoint(self, path: str) -> str:
        """Write the variables as a TF checkpoint (``path.index``/``path.data-*``, and the graph
        as ``path.meta``), the files ``tf.compat.v1.train.Saver`` reads."""
        import tensorflow as tf

        with self.tf_graph.as_default():  # (a Saver saves in graph mode only there)
            saver = tf.compat.v1.train.Saver(var_list={v.op.name: v for v in self.variables})
            return str(saver.save(self.sess, path, write_state=False))
