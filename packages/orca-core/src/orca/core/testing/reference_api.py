"""The reference's API (bigdl-orca 2.4), argument by argument, and what Orca does with each.

Users paste samples written for bigdl-orca. This module records, for every call they know
(``Estimator.from_torch``, ``fit``, ``init_orca_context``, ``XShards.partition``...), the
arguments the reference had and whether Orca accepts each under the same name:

- ``same``: accepted by that name (with the reference's default where ``default`` is given);
- ``different default``: accepted by that name, Orca's default differs (the note says how);
- ``different meaning``: accepted by that name, but it means something else in Orca;
- ``accepted, no effect``: accepted so a pasted call runs, ignored (the note says why);
- ``renamed``: Orca takes it as ``Arg.orca`` (a positional call still works);
- ``via **kwargs``: not a named parameter, accepted through the call's ``**kwargs``;
- ``not supported``: not a parameter: passing it raises ``TypeError`` naming it;
- ``Orca-only``: Orca's own addition (listed so every parameter Orca has is accounted for).

It is data, and checkable: each framework package's ``tests/test_reference_api.py`` calls
:func:`signature_problems` on its real classes (``inspect.signature``, no Spark or Ray), and
orca-core's test checks that ``docs/reference-diff.md`` is :func:`markdown` of this data, so
the page, the data and the code cannot drift apart. The reference's signatures were read from
its source (``python/orca/src/bigdl/orca/...``, the ray/spark estimators of 2.4) and from
``shared/reference/REFERENCE.md``. Nothing here imports a framework: a framework's module is
imported only when its own test asks for its signatures.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

SAME, DEFAULT, MEANING, NOOP = "same", "different default", "different meaning", "accepted, no effect"
RENAMED, KWARGS, UNSUPPORTED, ORCA_ONLY = "renamed", "via **kwargs", "not supported", "Orca-only"
STATUSES = (SAME, DEFAULT, MEANING, NOOP, RENAMED, KWARGS, UNSUPPORTED, ORCA_ONLY)
_UNSET: Any = object()


@dataclass(frozen=True)
class Arg:
    """One argument of a reference call and what Orca does with it.

    Attributes:
        name: the reference's name (for ``Orca-only``: Orca's name).
        status: one of :data:`STATUSES`.
        default: the reference's default; with ``same`` the test checks Orca's equals it.
        orca: Orca's name, for ``renamed``.
        note: the reason, and what a user does instead.
    """

    name: str
    status: str
    default: Any = _UNSET
    orca: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Method:
    """One call of the reference.

    Attributes:
        call: the call as the reference's users know it (``Estimator.fit``).
        target: where Orca has it, ``"module:Qual.name"``.
        args: the reference's arguments in its order, then Orca's own.
        positional: how many leading arguments sit in the same positions as in the reference
            (0 for keyword-only calls); later ones must be passed by keyword.
        missing: Orca has no such method (``target`` names where it would be).
        note: anything about the call as a whole (return type, file format).
    """

    call: str
    target: str
    args: tuple[Arg, ...] = ()
    positional: int = 0
    missing: bool = False
    note: str = ""


def _a(name: str, status: str = SAME, default: Any = _UNSET, note: str = "", orca: str | None = None) -> Arg:
    return Arg(name, status, default, orca, note)


_PATH = "Orca's parameter is `path`; a positional call works as written"

_TORCH = (
    Method("Estimator.from_torch", "orca.torch:Estimator.from_torch", (
        _a("model", default=None, note="None: an Estimator that can only `load` an entire saved model"),
        _a("optimizer", default=None, note="a torch optimizer (instance or creator), or the reference's "
           "`bigdl.orca.learn.optimizers` (`orca.torch.optimizers`: SGD, Adam... with their schedules, run as "
           "torch.optim)"),
        _a("loss", default=None),
        _a("metrics", default=None, note="a metric function gets torch tensors, as in the reference (one that "
           "fails on tensors gets numpy arrays, as Orca gave before)"),
        _a("backend", default="bigdl", note="the guide's default; the 2.4 code defaulted to `spark`: pass it. "
           "`horovod` needs `python -m orca.core.horovod_install torch`"),
        _a("config", default=None),
        _a("workers_per_node", default=1),
        _a("scheduler_creator", default=None, note="stepped once per epoch"),
        _a("use_tqdm", DEFAULT, note="True in Orca (a driver-side bar); False hides it"),
        _a("model_dir", default=None, note="where fit(checkpoint_trigger=...) writes its checkpoints "
                                           "(load_orca_checkpoint(model_dir) reads the newest); the trained state "
                                           "comes back to the driver either way"),
        _a("sync_stats", default=False, note="False: fit(reduce_results=False) gives each worker its own training "
                                             "stats; True: the stats merged exactly over all workers"),
        _a("log_level", NOOP, note="workers log through Python logging; set the `orca` logger's level"),
        _a("log_to_driver", NOOP, note="worker output reaches the driver with init_orca_context(log_output=True)"),
        _a("seed", ORCA_ONLY, note="seeds model creation and shuffling on every worker (0)"),
    )),
    Method("Estimator.fit", "orca.torch:Estimator.fit", (
        _a("data"), _a("epochs", default=1), _a("batch_size", default=32),
        _a("profile", default=False, note="each epoch's stats get `profile`: rank 0's `mean_train_epoch_s`, "
           "`mean_train_batch_s`, `mean_validation_s` (not the reference's forward/backward split)"),
        _a("reduce_results", default=True, note="False: per-worker lists (each worker's own training stats unless "
                                                "from_torch(sync_stats=True); validation stats merged)"),
        _a("feature_cols", default=None), _a("label_cols", default=None), _a("validation_data", default=None),
        _a("callbacks", default=None, note="orca Callbacks (see `Callback` below)"),
        _a("max_steps", default=None, note="as the reference: `epochs` is ignored, the fit runs as many epochs as "
                                           "max_steps takes (one History entry each); every backend here"),
        _a("checkpoint_trigger", default=None, note="the reference's BigDL backend: `EveryEpoch()` or "
           "`SeveralIteration(n)` (orca.core.engine.callbacks) write into from_torch's `model_dir`; without it "
           "nothing is written (a warning says so)"),
        _a("shuffle", ORCA_ONLY), _a("validation_freq", ORCA_ONLY), _a("steps_per_epoch", ORCA_ONLY),
        _a("validation_steps", ORCA_ONLY), _a("max_failures", ORCA_ONLY, note="restart after a lost worker"),
        _a("skip_non_finite_steps", ORCA_ONLY, note="leave out steps whose reduced gradient is NaN/Inf"),
    ), positional=3, note="returns a History (a list of per-epoch dicts, as the reference's), with Orca's keys and "
                          "the reference's (`val_` + the metric's name in lower case, e.g. `val_top5accuracy`)"),
    Method("Estimator.evaluate", "orca.torch:Estimator.evaluate", (
        _a("data"), _a("batch_size", default=32),
        _a("num_steps", default=None, note="at most that many batches per worker (per partition on the spark and "
                                           "bigdl backends)"),
        _a("profile", default=False, note="`result[\"profile\"]`: `mean_validation_s`, `mean_eval_fwd_s`, "
                                          "averaged over the workers"),
        _a("reduce_results", default=True, note="False: a list of per-worker results (per partition on the spark "
                                                "and bigdl backends), each over its own rows; True: exact over all rows "
                                                "(the reference averaged the workers' results)"),
        _a("feature_cols", default=None), _a("label_cols", default=None),
        _a("callbacks", default=None, note="a MainCallback runs the steps (on_val_forward); Orca's other "
                                           "callbacks have no evaluation hooks (a warning says so)"),
    ), positional=2, note="returns `val_loss`, `val_<metric>`, `num_samples` and each metric under the "
                          "reference's name (`Accuracy`, a metric function's name) as a 0-d tensor"),
    Method("Estimator.predict", "orca.torch:Estimator.predict", (
        _a("data"), _a("batch_size", default=32), _a("feature_cols", default=None),
        _a("profile", NOOP, default=False, note="the reference's predict returned the predictions only (its "
                                                "timings never reached the caller)"),
        _a("callbacks", default=None, note="a MainCallback's on_pred_forward runs in every worker instead of the "
           "model's forward; each top-level output is one column (a dict: a struct column keyed by its keys); "
           "Orca's other callbacks have no prediction hooks (a warning says so)"),
        _a("output_cols", ORCA_ONLY, note="names of the prediction column(s)"),
    ), positional=3),
    Method("Estimator.get_state_dict", "orca.torch:Estimator.get_state_dict",
           note="the reference's layout: `{\"epoch\", \"models\": [model state dict], \"optimizers\": [...], "
                "\"schedulers\": [...]}`"),
    Method("Estimator.load_state_dict", "orca.torch:Estimator.load_state_dict", (
        _a("state_dict", note="get_state_dict()'s, or a model's plain state dict"),
        _a("blocking", NOOP, default=True, note="the driver holds the state; workers load it before their next call"),
    ), positional=2),
    Method("Estimator.load_orca_checkpoint", "orca.torch:Estimator.load_orca_checkpoint", (
        _a("path", note="model_dir (its newest checkpoint) or a checkpoint file"),
        _a("version", default=None, note="the epoch or step number in the checkpoint's name"),
        _a("prefix", NOOP, default=None, note="an Orca checkpoint is one file with the model and the optimizer"),
    ), positional=3),
    Method("Estimator.save", "orca.torch:Estimator.save", (
        _a("model_path", RENAMED, orca="path", note=_PATH), _a("entire", default=False),
    ), positional=2, note="writes a plain state dict (the reference: the Estimator state with the optimizer); "
                          "save_checkpoint keeps the optimizer"),
    Method("Estimator.load", "orca.torch:Estimator.load", (
        _a("model_path", RENAMED, orca="path", note=_PATH),
        _a("weights_only", ORCA_ONLY, note="False to unpickle an entire module (trusted files only)"),
    ), positional=1),
    Method("Estimator.save_checkpoint", "orca.torch:Estimator.save_checkpoint", (
        _a("model_path", RENAMED, orca="path", note=_PATH),
    ), positional=1, note="the file holds arrays only, no pickle"),
    Method("Estimator.load_checkpoint", "orca.torch:Estimator.load_checkpoint", (
        _a("model_path", RENAMED, orca="path", note=_PATH),
        _a("allow_pickle", ORCA_ONLY, note="reads a pickled checkpoint (trusted files only)"),
    ), positional=1),
    Method("Estimator.latest_checkpoint", "orca.torch:Estimator.latest_checkpoint", (
        _a("checkpoint_dir", RENAMED, orca="directory", note="Orca's parameter is `directory`"),
    ), positional=1),
    Method("Estimator.get_model", "orca.torch:Estimator.get_model"),
    Method("Estimator.shutdown", "orca.torch:Estimator.shutdown"),
    Method("ModelCheckpoint", "orca.torch:ModelCheckpoint", (
        _a("filepath", note="required (the reference's None failed); a name without an extension is named as "
                            "the reference's: `test-{epoch}` -> `test-epoch=1.ckpt`; one with an extension is "
                            "filled in: `model-{epoch}.ckpt` -> `model-1.ckpt`"),
        _a("save_weights_only", default=False, note="True: the model's weights and the epoch only"),
        _a("by_epoch", default=True, note="False: every `interval` steps of the fit"),
        _a("interval", default=-1, note="epochs or steps between checkpoints; -1: every epoch"),
        _a("save_every_n_iters", ORCA_ONLY, note="also save every n steps (`{iter}`: the step within its epoch)"),
    ), positional=4, note="from orca.torch.callbacks (the reference's bigdl.orca.learn.pytorch.callbacks); it does "
                          "not write the reference's `last.ckpt`: latest_checkpoint(dir) finds the newest by number"),
    Method("Callback", "orca.torch:Callback", note="from orca.torch.callbacks: Orca's hooks on_train_begin, "
           "on_epoch_begin, on_batch_end, on_epoch_end(epoch, logs), on_train_end(logs), `self.model`, and the "
           "reference's before_run/before_epoch/after_iter/after_epoch/after_run (and their _train_ forms) with a "
           "runner (`model`, `optimizer`, `epochs`, `global_step`, `epoch_stats`, `rank`...); no "
           "before_iter, val or pred hooks"),
    Method("MainCallback", "orca.torch:MainCallback", note="from orca.torch.callbacks: on_train_forward, "
           "on_iter_backward, on_val_forward, on_lr_adjust run the fit's and evaluate's steps (the gradient is "
           "averaged over the workers in runner.optimizer.step()), and on_pred_forward runs predict's step"),
    Method("TensorBoardCallback", "orca.torch:TensorBoardCallback", (
        _a("log_dir", default=None, note="required; written by rank 0"),
        _a("freq", default="epoch", note="`epoch`: each epoch's merged stats; `batch` or n: rank 0's train_loss"),
    ), positional=2, note="from orca.torch.callbacks; **kwargs go to SummaryWriter. est.set_tensorboard(log_dir) "
                          "writes the merged stats on the driver instead"),
    Method("process_stats", "orca.torch:process_stats", (_a("worker_stats"),), positional=1,
           note="the reference's bigdl.orca.learn.pytorch.utils.process_stats: evaluate(reduce_results=False)'s "
                "per-worker results reduced as the reference did (num_samples summed, the rest averaged)"),
)

_KERAS_ONLY = "Keras option Orca does not pass on"
_TF2 = (
    Method("Estimator.from_keras", "orca.tf:Estimator.from_keras", (
        _a("model_creator", default=None, note="or keras_model=; with neither, as the reference, the Estimator "
                                               "takes its model from the first load() (uncompiled where Keras "
                                               "cannot rebuild the file's compile settings)"),
        _a("keras_model", default=None, note="the reference's TF1 from_keras: a compiled model, trained as a "
                                             "model_creator would be (its config, compile config and weights travel)"),
        _a("config", default=None), _a("verbose", DEFAULT, note="1 in Orca (the driver's progress bar)"),
        _a("workers_per_node", default=1), _a("compile_args_creator", default=None),
        _a("backend", default="ray", note="`horovod` needs TF 2.15 and `python -m orca.core.horovod_install "
           "tensorflow`, in an environment of its own"),
        _a("cpu_binding", UNSUPPORTED, note="each worker gets its node's CPUs divided by the workers on it"),
        _a("log_to_driver", UNSUPPORTED, note="use init_orca_context(log_output=True)"),
        _a("model_dir", NOOP, note="optional on every backend (the reference's spark backend required it to pass "
                                   "the state): the trained state comes back to the driver"),
        _a("seed", ORCA_ONLY, note="seeds model creation and shuffling on every worker (0)"),
        _a("metrics", default=None, note="the TF1 from_keras's: with keras_model=, replaces the compiled metrics"),
        _a("optimizer", default=None, note="the TF1 from_keras's: with keras_model=, replaces the compiled "
                                           "optimizer (a Keras optimizer of the model's flavour, not a BigDL one)"),
    )),
    Method("Estimator.fit", "orca.tf:Estimator.fit", (
        _a("data"), _a("epochs", default=1), _a("batch_size", default=32),
        _a("verbose", DEFAULT, note="None: the Estimator's `verbose`"), _a("callbacks", default=None),
        _a("validation_data", default=None), _a("class_weight", default=None), _a("initial_epoch", default=0),
        _a("steps_per_epoch", default=None, note="needed for data creators of unknown size only (the reference "
                                                 "required it for DataFrames and XShards)"),
        _a("validation_steps", default=None), _a("validation_freq", default=1),
        _a("data_config", default=None, note="merged into a data creator's config; other data: a one-time "
                                             "warning (no output_signature needed)"),
        _a("feature_cols", default=None), _a("label_cols", default=None),
        _a("shuffle", ORCA_ONLY), _a("max_failures", ORCA_ONLY, note="restart after a lost worker"),
        _a("skip_non_finite_steps", ORCA_ONLY, note="leave out steps whose reduced gradient is NaN/Inf"),
    ), positional=3, note="returns a History: a list of per-epoch dicts that also reads as the reference's dict "
                          "(`stats[\"loss\"]` the per-epoch list, `stats[\"epochs\"]`, `stats[\"steps\"]`; "
                          "`history.history` is Keras' dict); `isinstance(stats, dict)` is False"),
    Method("Estimator.evaluate", "orca.tf:Estimator.evaluate", (
        _a("data"), _a("batch_size", default=32),
        _a("num_steps", default=None, note="the first `num_steps` global batches (an XShards: all of it or "
                                           "a ValueError)"),
        _a("verbose", UNSUPPORTED, note=_KERAS_ONLY), _a("sample_weight", UNSUPPORTED, note=_KERAS_ONLY),
        _a("callbacks", UNSUPPORTED, note="callbacks run in fit only"),
        _a("data_config", default=None, note="as fit's"),
        _a("feature_cols", default=None), _a("label_cols", default=None),
    ), positional=3, note="keys `loss` and the metric names, also as `val_<name>` and the reference's "
                          "`validation_<name>`"),
    Method("Estimator.predict", "orca.tf:Estimator.predict", (
        _a("data"), _a("batch_size", default=32), _a("verbose", UNSUPPORTED, note=_KERAS_ONLY),
        _a("steps", UNSUPPORTED, note="predicts all of `data`: pass a subset"),
        _a("callbacks", UNSUPPORTED, note="callbacks run in fit only"),
        _a("data_config", UNSUPPORTED, note="put the values in from_keras(config=...)"),
        _a("feature_cols", default=None),
        _a("min_partition_num", UNSUPPORTED, note="rows are spread over the workers whatever the partitions"),
        _a("output_cols", default=None),
    ), positional=2),
    Method("Estimator.save", "orca.tf:Estimator.save", (
        _a("filepath"), _a("overwrite", default=True), _a("include_optimizer", default=True),
        _a("save_format", default=None, note="`keras`, `h5` or `tf` (a SavedModel)"),
        _a("signatures", UNSUPPORTED, note="export with model.export() from get_model()"),
        _a("options", UNSUPPORTED, note="save get_model() with Keras directly"),
    ), positional=4),
    Method("Estimator.load", "orca.tf:Estimator.load", (
        _a("filepath"),
        _a("custom_objects", UNSUPPORTED, note="register custom classes with "
                                               "keras.saving.register_keras_serializable"),
        _a("compile", UNSUPPORTED, note="the weights (and optimizer state) go into the creator's compiled model"),
        _a("options", UNSUPPORTED, note="load with Keras, then set_state / load_weights"),
    ), positional=1),
    Method("Estimator.save_weights", "orca.tf:Estimator.save_weights", (
        _a("filepath", note="Keras 3 wants a `.weights.h5` name"), _a("overwrite", default=True),
        _a("save_format", UNSUPPORTED, note="the file name picks the format"),
        _a("options", UNSUPPORTED, note="save get_model()'s weights with Keras directly"),
    ), positional=2),
    Method("Estimator.load_weights", "orca.tf:Estimator.load_weights", (
        _a("filepath"),
        _a("by_name", UNSUPPORTED, note="load into get_model() with Keras, then save_weights/load_weights"),
        _a("skip_mismatch", UNSUPPORTED, note="as by_name"), _a("options", UNSUPPORTED, note="as by_name"),
    ), positional=1),
    Method("Estimator.save_checkpoint", "orca.tf:Estimator.save_checkpoint", (
        _a("checkpoint", RENAMED, orca="path", note=_PATH),
    ), positional=1, note="the file holds arrays only, no pickle"),
    Method("Estimator.load_checkpoint", "orca.tf:Estimator.load_checkpoint", (
        _a("checkpoint", RENAMED, orca="path", note=_PATH),
        _a("allow_pickle", ORCA_ONLY, note="reads a pickled checkpoint (trusted files only)"),
    ), positional=1),
    Method("Estimator.latest_checkpoint", "orca.tf:Estimator.latest_checkpoint", (
        _a("checkpoint_dir", RENAMED, orca="directory", note="returns the newest Orca checkpoint file (the "
                                                             "reference: a TF checkpoint prefix)"),
    ), positional=1),
    Method("Estimator.get_model", "orca.tf:Estimator.get_model", (
        _a("set_weights", default=True, note="the reference's spark backend's"),
        _a("sample_input", default=None, note="the reference's ray backend's: builds a subclassed model"),
    )),
    Method("Estimator.shutdown", "orca.tf:Estimator.shutdown"),
)

_MXNET = (
    Method("create_config", "orca.mxnet:create_config", (
        _a("optimizer", default="sgd"), _a("optimizer_params", default=None),
        _a("log_interval", NOOP, default=10, note="progress is the driver's bar"),
        _a("seed", default=None), _a("extra_config", default=None),
    ), positional=5),
    Method("Estimator.from_mxnet", "orca.mxnet:Estimator.from_mxnet", (
        _a("config", DEFAULT, note="optional here (default create_config())"), _a("model_creator"),
        _a("loss_creator", default=None, note="a Gluon loss instance works too"),
        _a("eval_metrics_creator", default=None), _a("validation_metrics_creator", default=None),
        _a("num_workers", default=None, note="workers in all on one node; workers_per_node on a cluster"),
        _a("num_servers", NOOP, default=None, note="no parameter servers: orca.core.sync all-reduces gradients"),
        _a("runner_cores", NOOP, default=None, note="each worker gets its node's CPUs divided by its workers"),
        _a("workers_per_node", ORCA_ONLY), _a("backend", ORCA_ONLY, note="`ray` (default) or `spark`"),
        _a("model_dir", ORCA_ONLY), _a("use_tqdm", ORCA_ONLY),
    )),
    Method("Estimator.fit", "orca.mxnet:Estimator.fit", (
        _a("data"), _a("epochs", default=1),
        _a("batch_size", MEANING, default=32, note="the global batch, split over the workers (the reference: per "
                                                   "worker); a data creator reads its share in config['batch_size']"),
        _a("validation_data", default=None),
        _a("train_resize_batch_num", UNSUPPORTED, note="uneven shares cannot crash here (exact global batches); "
                                                       "steps_per_epoch bounds a data creator's epoch"),
        _a("feature_cols", ORCA_ONLY), _a("label_cols", ORCA_ONLY), _a("callbacks", ORCA_ONLY),
        _a("max_steps", ORCA_ONLY), _a("shuffle", ORCA_ONLY), _a("reduce_results", ORCA_ONLY),
        _a("validation_freq", ORCA_ONLY), _a("steps_per_epoch", ORCA_ONLY), _a("validation_steps", ORCA_ONLY),
        _a("max_failures", ORCA_ONLY), _a("skip_non_finite_steps", ORCA_ONLY),
    ), positional=3, note="data creators take (config, kv) as in the reference; returns a History (the "
                          "reference: raw per-worker stats)"),
    Method("Estimator.evaluate", "orca.mxnet:Estimator.evaluate", (
        _a("data"), _a("batch_size", default=32),
        _a("num_steps", UNSUPPORTED, note="evaluates all of `data`: pass a subset"),
        _a("feature_cols", ORCA_ONLY), _a("label_cols", ORCA_ONLY),
    ), positional=2, note="the reference raised NotImplementedError"),
    Method("Estimator.predict", "orca.mxnet:Estimator.predict", (
        _a("data"), _a("batch_size", default=32), _a("feature_cols", ORCA_ONLY), _a("output_cols", ORCA_ONLY),
    ), positional=2, note="the reference raised NotImplementedError"),
    Method("Estimator.save", "orca.mxnet:Estimator.save", (
        _a("checkpoint", RENAMED, orca="path", note=_PATH),
    ), positional=1, note="the reference raised NotImplementedError; MXNet's own parameter format"),
    Method("Estimator.load", "orca.mxnet:Estimator.load", (
        _a("checkpoint", RENAMED, orca="path", note=_PATH),
    ), positional=1, note="the reference raised NotImplementedError"),
    Method("Estimator.get_model", "orca.mxnet:Estimator.get_model", note="the reference raised NotImplementedError"),
    Method("Estimator.shutdown", "orca.mxnet:Estimator.shutdown"),
)

_FEATURES = "None reads the `features` column of a DataFrame, as the reference's default did"
_BIGDL = (
    Method("Estimator.from_bigdl", "orca.bigdl:Estimator.from_bigdl", (
        _a("model"), _a("loss", default=None), _a("optimizer", default=None), _a("metrics", default=None),
        _a("feature_preprocessing", default=None), _a("label_preprocessing", default=None),
        _a("model_dir", default=None),
    )),
    Method("Estimator.fit", "orca.bigdl:Estimator.fit", (
        _a("data"), _a("epochs", DEFAULT, note="1 here (required in the reference)"), _a("batch_size", default=32),
        _a("feature_cols", DEFAULT, note=_FEATURES),
        _a("label_cols", DEFAULT, note="None reads the `label` column of a DataFrame, as the reference's default"),
        _a("caching_sample", default=True), _a("validation_data", default=None),
        _a("validation_trigger", default=None, note="None validates every epoch (the reference required one)"),
        _a("checkpoint_trigger", default=None),
    ), positional=9, note="returns a History (the reference: the Estimator)"),
    Method("Estimator.evaluate", "orca.bigdl:Estimator.evaluate", (
        _a("data"), _a("batch_size", default=32), _a("feature_cols", DEFAULT, note=_FEATURES),
        _a("label_cols", DEFAULT, note="None reads the `label` column, as the reference's default"),
    ), positional=4),
    Method("Estimator.predict", "orca.bigdl:Estimator.predict", (
        _a("data"), _a("batch_size", DEFAULT, note="32 here (4 in the reference)"),
        _a("feature_cols", DEFAULT, note=_FEATURES),
        _a("sample_preprocessing", UNSUPPORTED, note="give feature_preprocessing to from_bigdl"),
    ), positional=3),
    Method("Estimator.save", "orca.bigdl:Estimator.save", (
        _a("model_path", RENAMED, orca="path", note=_PATH + "; one file (Model.loadModel), not .bigdl + .bin"),
    ), positional=1),
    Method("Estimator.load", "orca.bigdl:Estimator.load", (
        _a("checkpoint", RENAMED, orca="path", note=_PATH),
        _a("optimizer", UNSUPPORTED, note="give it to from_bigdl"), _a("loss", UNSUPPORTED, note="as optimizer"),
        _a("feature_preprocessing", UNSUPPORTED, note="as optimizer"),
        _a("label_preprocessing", UNSUPPORTED, note="as optimizer"), _a("model_dir", UNSUPPORTED, note="as optimizer"),
        _a("is_checkpoint", UNSUPPORTED, note="use load_orca_checkpoint(path)"),
    ), positional=1),
    Method("Estimator.load_orca_checkpoint", "orca.bigdl:Estimator.load_orca_checkpoint", (
        _a("path"), _a("version", UNSUPPORTED, note="loads the newest `model.<n>` under path: point it at one"),
        _a("prefix", UNSUPPORTED, note="the optimizer's state is not restored: give from_bigdl a fresh one"),
    ), positional=1),
    Method("Estimator.get_model", "orca.bigdl:Estimator.get_model"),
    Method("Estimator.set_tensorboard", "orca.bigdl:Estimator.set_tensorboard",
           (_a("log_dir"), _a("app_name", DEFAULT, note="optional in Orca: `orca` by default")), positional=2, note="keeps the summaries BigDL writes (per iteration) in log_dir/app_name"),
    Method("Estimator.get_train_summary", "orca.bigdl:Estimator.get_train_summary", (_a("tag"),), positional=1,
           note="`Loss` or `Throughput`: [[iteration, value, wall time], ...], one row per iteration"),
    Method("Estimator.get_validation_summary", "orca.bigdl:Estimator.get_validation_summary", (_a("tag"),),
           positional=1, note="`Loss` or a metric's BigDL name, one row per validation"),
    *(Method(f"Estimator.{m}", f"orca.bigdl:Estimator.{m}", missing=True, note=n) for m, n in (
        ("clear_gradient_clipping", "gradient clipping is not offered"),
        ("set_constant_gradient_clipping", "gradient clipping is not offered"),
        ("set_l2_norm_gradient_clipping", "gradient clipping is not offered"),
    )),
)

_OPENVINO = (
    Method("Estimator.from_openvino", "orca.openvino:Estimator.from_openvino", (
        _a("model_path", note="an ONNX file or an ov.Model work too"),
        _a("backend", ORCA_ONLY, note="`spark` (default) or `ray`"), _a("workers_per_node", ORCA_ONLY),
        _a("config", ORCA_ONLY, note="default inference settings"),
    )),
    Method("Estimator.predict", "orca.openvino:Estimator.predict", (
        _a("data"), _a("feature_cols", default=None, note="second in the reference, third here: pass by keyword"),
        _a("batch_size", default=4), _a("input_cols", default=None), _a("config", default=None),
        _a("output_cols", ORCA_ONLY, note="names of the prediction column(s)"),
    ), positional=1),
    Method("Estimator.get_model", "orca.openvino:Estimator.get_model", note="the reference raised; an ov.Model here"),
    Method("Estimator.save", "orca.openvino:Estimator.save", (
        _a("model_path", RENAMED, orca="path", note=_PATH),
    ), positional=1, note="the reference raised; writes IR here"),
    Method("Estimator.load", "orca.openvino:Estimator.load", (
        _a("model_path", RENAMED, orca="path", note=_PATH),
    ), positional=1),
)

_CORE = (
    Method("init_orca_context", "orca.core:init_orca_context", (
        _a("cluster_mode", DEFAULT, note="`local` here; the reference's None used a running SparkContext if there "
                                         "was one (here: cluster_mode='spark-submit'), else local"),
        _a("runtime", default="spark", note="second in the reference, fifth here: pass by keyword"),
        _a("cores", DEFAULT, note="2 here (the reference: all cores in local mode, 2 per node elsewhere)"), _a("memory", default="2g"),
        _a("num_nodes", default=1), _a("init_ray_on_spark", default=False),
        _a("init_executor_gateway", UNSUPPORTED, note="no executor gateway is needed"),
        _a("conf", default=None),
        *(_a(n, KWARGS) for n in ("master", "container_image", "extra_python_lib", "penv_archive",
                                  "driver_cores", "driver_memory", "spark_log_level")),
        _a("object_store_memory", KWARGS, note="bytes as an int, or a size string: '1g' is 2**30 bytes (the "
                                               "reference's 'g' was 10**9); anything else raises ValueError"),
        _a("hadoop_conf", UNSUPPORTED, note="set HADOOP_CONF_DIR in the environment"),
        _a("jars", UNSUPPORTED, note="conf={'spark.jars': ...}; plug-ins declare theirs"),
        _a("python_location", UNSUPPORTED, note="workers run the driver's sys.executable"),
        _a("redirect_spark_log", UNSUPPORTED, note="Spark logs where log4j says; spark_log_level sets the level"),
        _a("address", ORCA_ONLY, note="attach to a running Ray cluster"),
        _a("ray_on_driver", ORCA_ONLY), _a("ray_auth", ORCA_ONLY, note="Ray token auth (on)"),
    ), positional=1, note="returns the running SparkContext where Spark runs, as the reference did (it also answers "
                          "as the OrcaContext: sc.spark_session(), sc.settings; sc.stop() ends the whole context), "
                          "and with runtime='ray' the OrcaContext (the reference: its OrcaRayContext); unknown "
                          "keyword arguments raise TypeError before anything starts"),
    Method("stop_orca_context", "orca.core:stop_orca_context"),
    Method("OrcaContext.<setting> = value", "orca.core:OrcaSettings", (
        _a("log_output", note="set on the class before (or after) init_orca_context, or passed to it"),
        _a("barrier_mode", NOOP, note="Orca's Spark training stages always run in barrier mode"),
        _a("shard_size", NOOP, note="data is split by partition"),
        _a("pandas_read_backend", DEFAULT, note="'pandas', what the readers always use; 'spark' is accepted with a "
                                                "one-time warning and reads with pandas too"),
        _a("serialize_data_creator", NOOP, note="data creators run concurrently; True warns once (a creator that "
                                                "downloads to a shared path should lock it)"),
        _a("train_data_store", MEANING, note="sets worker_data_memory_mb: 'DRAM' math.inf (every share in memory), "
                                             "'DISK_n' 0 (every share streams to local disk, read back in 1 MiB "
                                             "windows; n is not used), 'PMEM' as 'DRAM' with a one-time warning"),
        *(_a(n, ORCA_ONLY) for n in ("worker_timeout_s", "worker_start_timeout_s", "max_failures",
                                     "ray_start_timeout_s", "worker_data_memory_mb", "warm_workers_s", "jvm_class_cache")),
    ), note="settings are per context: given to init_orca_context, or assigned on the class (the running "
            "context's and the next ones'); reading one gives what was set; a value that cannot work raises "
            "ValueError naming the valid ones"),
    Method("OrcaContext.get_spark_session", "orca.core:OrcaContext.get_spark_session"),
    Method("OrcaContext.get_spark_context", "orca.core:OrcaContext.get_spark_context",
           note="the running SparkContext, which also answers as the OrcaContext"),
    Method("OrcaContext.get_ray_context", "orca.core:OrcaContext.get_ray_context",
           note="returns Orca's RayRuntime; the reference's OrcaRayContext is `orca.core.OrcaRayContext.get()`"),
    Method("OrcaRayContext.get", "orca.core:OrcaRayContext.get", (_a("initialize", default=True),), positional=1,
           note="the running context's Ray as the reference's OrcaRayContext (address_info, num_ray_nodes, "
                "ray_node_cpu_cores, stop()); constructing one directly raises TypeError naming init_orca_context"),
    Method("XShards.partition", "orca.core:XShards.partition", (
        _a("data"), _a("num_shards", default=None), _a("backend", ORCA_ONLY, note="spark, ray or local"),
    ), positional=2),
    Method("XShards.transform_shard", "orca.core:XShards.transform_shard", (
        _a("func", RENAMED, orca="fn", note="Orca's parameter is `fn`; a positional call works as written"),
    ), positional=1),
    Method("XShards.collect", "orca.core:XShards.collect"),
    Method("XShards.num_partitions", "orca.core:XShards.num_partitions"),
    Method("XShards.repartition", "orca.core:XShards.repartition", (_a("num_partitions"),), positional=1),
    Method("XShards.split", "orca.core:XShards.split"),
    Method("XShards.zip", "orca.core:XShards.zip", (_a("other"),), positional=1),
    Method("XShards.to_spark_df", "orca.core:XShards.to_spark_df"),
    Method("XShards.get_schema", "orca.core:XShards.get_schema"),
    Method("XShards.save_pickle", "orca.core:XShards.save_pickle", (
        _a("path"), _a("batchSize", UNSUPPORTED, note="one file per shard"),
    ), positional=1),
    Method("XShards.load_pickle", "orca.core:XShards.load_pickle", (
        _a("path"), _a("minPartitions", UNSUPPORTED, note="one shard per file: repartition() after loading"),
        _a("backend", ORCA_ONLY),
        _a("allow_pickle", ORCA_ONLY, note="required: unpickling runs code, so pass True for trusted files"),
    ), positional=1, note="reads the files save_pickle wrote (not the reference's Spark pickle files)"),
    *(Method(f"read_{kind}", f"orca.core.data:read_{kind}", (
        _a("file_path", RENAMED, orca="path", note=_PATH),
        *((_a("columns", KWARGS, note="passed to pandas.read_parquet"),
           _a("schema", UNSUPPORTED, note="pandas/pyarrow take no Spark schema: cast the columns after reading"))
          if kind == "parquet" else ()),
        _a("num_shards", ORCA_ONLY), _a("backend", ORCA_ONLY),
    ), positional=1, note=f"other keyword arguments go to pandas.read_{kind}") for kind in ("csv", "json", "parquet")),
)

_GRAPH = "orca.tf.graph_estimator:GraphEstimator"
_TF1_AUTO_SHARD = "each worker reads its own share of any input: there are no files to shard"
_TF1 = (
    Method("Estimator.from_graph", "orca.tf:Estimator.from_graph", (
        _a("inputs"), _a("outputs"), _a("labels", default=None), _a("loss", default=None),
        _a("optimizer", default=None, note="a tf.compat.v1.train.Optimizer"),
        _a("metrics", default=None, note="scalar batch-mean tensors by name, merged exactly over all rows (or "
                                         "orca metric names)"),
        _a("clip_norm", default=None), _a("clip_value", default=None),
        _a("updates", default=None, note="run with every step; what they change is averaged over the workers at "
                                         "each epoch end"),
        _a("sess", default=None), _a("model_dir", default=None),
        _a("backend", ORCA_ONLY, note="`spark` or `ray` (the reference ran graphs on BigDL)"),
        _a("workers_per_node", ORCA_ONLY), _a("verbose", ORCA_ONLY), _a("seed", ORCA_ONLY),
    ), note="the TF 1.15 path; returns an Estimator whose fit/evaluate/predict follow"),
    Method("Estimator.fit (from_graph)", f"{_GRAPH}.fit", (
        _a("data", note="also a tf.data.Dataset (it travels as its graph) or a data creator"),
        _a("epochs", default=1), _a("batch_size", default=32), _a("feature_cols", default=None),
        _a("label_cols", default=None), _a("validation_data", default=None),
        _a("session_config", UNSUPPORTED, note="each worker's session gets its share of the node's CPUs"),
        _a("checkpoint_trigger", UNSUPPORTED, note="pass callbacks=[ModelCheckpoint(...)] (orca.core), or "
                                                   "save() after fit"),
        _a("auto_shard_files", UNSUPPORTED, note=_TF1_AUTO_SHARD),
        _a("callbacks", ORCA_ONLY), _a("max_steps", ORCA_ONLY), _a("shuffle", ORCA_ONLY),
        _a("validation_freq", ORCA_ONLY), _a("max_failures", ORCA_ONLY), _a("skip_non_finite_steps", ORCA_ONLY),
    ), positional=3, note="returns a History (the reference returned the Estimator)"),
    Method("Estimator.evaluate (from_graph)", f"{_GRAPH}.evaluate", (
        _a("data"), _a("batch_size", default=32), _a("feature_cols", default=None), _a("label_cols", default=None),
        _a("auto_shard_files", UNSUPPORTED, note=_TF1_AUTO_SHARD),
    ), positional=2),
    Method("Estimator.set_constant_gradient_clipping", f"{_GRAPH}.set_constant_gradient_clipping",
           (_a("min"), _a("max")), positional=2, note="from the next step on"),
    Method("Estimator.set_l2_norm_gradient_clipping", f"{_GRAPH}.set_l2_norm_gradient_clipping",
           (_a("clip_norm"),), positional=1, note="from the next step on"),
    Method("Estimator.clear_gradient_clipping", f"{_GRAPH}.clear_gradient_clipping"),
    Method("Estimator.set_tensorboard", f"{_GRAPH}.set_tensorboard",
           (_a("log_dir"), _a("app_name", DEFAULT, note="optional in Orca: `orca` by default")), positional=2,
           note="each epoch's merged stats, written on the driver as the epoch ends (on every Orca Estimator)"),
    Method("Estimator.get_train_summary", f"{_GRAPH}.get_train_summary", (_a("tag"),), positional=1,
           note="`Loss`, `Throughput` or a metric: [[iteration, value, wall time], ...], one row per epoch"),
    Method("Estimator.get_validation_summary", f"{_GRAPH}.get_validation_summary", (_a("tag"),), positional=1,
           note="`Loss` or a metric of the validation data, one row per epoch"),
)

#: framework -> the reference's calls, checked against Orca's signatures
REFERENCE_API: dict[str, tuple[Method, ...]] = {
    "core": _CORE, "torch": _TORCH, "tf": _TF2 + _TF1, "mxnet": _MXNET, "bigdl": _BIGDL, "openvino": _OPENVINO,
}

#: the reference's TF 1.15 calls Orca does not have yet (issue #16)
PENDING: tuple[tuple[str, str], ...] = (
    ("Estimator.load_orca_checkpoint(path, version)", "not yet: load(path) reads a TF checkpoint of the graph"),
    ("EveryEpoch(), SeveralIteration(n) triggers", "not yet: save() after fit, or an orca Callback"),
)


# ---------------------------------------------------------------- checks
def resolve(target: str) -> Any:
    """The object at ``"module:Qual.name"`` (importing the module), or None when it is missing."""
    module, _, qual = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _parameters(obj: Any) -> list[inspect.Parameter]:
    params = list(inspect.signature(obj).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return params


def assert_matches_reference(framework: str) -> None:
    """Fail (AssertionError listing every disagreement) unless :data:`REFERENCE_API` ``[framework]``
    holds calls and all of them agree with Orca's real signatures; what each package's test runs."""
    assert REFERENCE_API[framework], f"no reference calls recorded for {framework}"
    problems = signature_problems(framework)
    assert not problems, "reference_api data and Orca differ:\n" + "\n".join(problems)


def signature_problems(framework: str) -> list[str]:
    """Every disagreement between :data:`REFERENCE_API` ``[framework]`` and Orca's real signatures.

    Imports the framework's package (only here). Empty when the data is true.
    """
    problems: list[str] = []
    for method in REFERENCE_API[framework]:
        where = f"{method.call} ({method.target})"
        obj = resolve(method.target)
        if method.missing or obj is None:
            if method.missing != (obj is None):
                problems.append(f"{where}: the data says missing={method.missing}, Orca has it: {obj is not None}")
            continue
        params = _parameters(obj)
        named = {p.name: p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        has_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
        accounted = set()
        for arg in method.args:
            problems += [f"{where}: `{arg.name}` {p}" for p in _arg_problems(arg, named, has_kwargs)]
            accounted.add(arg.orca if arg.status == RENAMED else arg.name)
        problems += [f"{where}: Orca's `{n}` is not in the data" for n in named if n not in accounted]
        ref = [a.orca if a.status == RENAMED else a.name for a in method.args if a.status != ORCA_ONLY]
        orca = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if ref[:method.positional] != orca[:method.positional]:
            problems.append(f"{where}: the first {method.positional} positional arguments differ: reference "
                            f"{ref[:method.positional]}, Orca {orca[:method.positional]}")
    return problems


def _arg_problems(arg: Arg, named: dict[str, inspect.Parameter], has_kwargs: bool) -> list[str]:
    if arg.status not in STATUSES:
        return [f"has an unknown status {arg.status!r}"]
    if arg.status == RENAMED:
        if arg.name in named or arg.orca not in named:
            return [f"is said renamed to `{arg.orca}`: Orca's parameters are {sorted(named)}"]
        return []
    if arg.status in (UNSUPPORTED, KWARGS):
        out = [f"is said {arg.status} but is a named parameter"] if arg.name in named else []
        if arg.status == KWARGS and not has_kwargs:
            out.append("is said to go through **kwargs, which the call does not take")
        return out
    if arg.name not in named:
        return [f"is said {arg.status} but Orca has no such parameter"]
    if arg.status == SAME and arg.default is not _UNSET and named[arg.name].default != arg.default:
        return [f"default: reference {arg.default!r}, Orca {named[arg.name].default!r}"]
    return []


# ---------------------------------------------------------------- the page
_TITLES = {
    "torch": "PyTorch: `from orca.torch import Estimator`",
    "tf": "TensorFlow 2 / Keras: `from orca.tf import Estimator`",
    "mxnet": "MXNet: `from orca.mxnet import Estimator, create_config`",
    "bigdl": "BigDL: `from orca.bigdl import Estimator`",
    "openvino": "OpenVINO: `from orca.openvino import Estimator`",
    "core": "Context, XShards and readers: `from orca.core import ...`",
}

DOC_HEADER = """# Orca and the reference API, argument by argument

Orca keeps the API of the reference (bigdl-orca 2.4) so its samples run with only the import
lines changed (`bigdl.orca.learn.pytorch` -> `orca.torch`, ...). This page lists, for every
call and argument the reference had, what Orca does with it, why, and what to do instead.
Status: **same** (the same name; the same default where one is shown), **different default**,
**different meaning**, **accepted, no effect** (a pasted call runs; the argument is ignored),
**renamed** (a positional call still works), **via \\*\\*kwargs**, **not supported** (passing it
raises `TypeError` naming it), **Orca-only** (Orca's addition). "Positional" says how many
leading arguments sit where the reference had them; pass the others by keyword.

The page is generated from `orca.core.testing.reference_api` (`markdown()`); every framework
package's `tests/test_reference_api.py` checks that data against Orca's real signatures, and
orca-core's test fails when this page and the data differ.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(arg: Arg) -> str:
    status = f"renamed: `{arg.orca}`" if arg.status == RENAMED else arg.status
    if arg.status == SAME and arg.default is not _UNSET:
        status += f" (`{arg.default!r}`)"
    return f"| `{arg.name}` | {status} | {_cell(arg.note)} |"


#: the line after which docs/reference-diff.md is written by hand (measurements): markdown(keep=page) keeps it
HAND_WRITTEN = "<!-- Written by hand below this line: markdown() keeps it, generates the rest. -->"


def markdown(keep: str = "") -> str:
    """The reference-diff page (docs/reference-diff.md) rendered from :data:`REFERENCE_API`.

    Args:
        keep: the page as it is: its hand-written tail (from :data:`HAND_WRITTEN` on) is kept.

    Returns:
        The page: the generated part, then the kept tail.
    """
    _, marker, tail = keep.partition(HAND_WRITTEN)
    return _generated() + (f"\n{marker}{tail}" if marker else "")


def _generated() -> str:
    out = [DOC_HEADER.rstrip("\n")]
    for framework in ("torch", "tf", "mxnet", "bigdl", "openvino", "core"):
        out.append(f"\n## {_TITLES[framework]}")
        if framework == "tf":
            out.append("\nThe reference's TF 1.15 calls Orca does not have yet (those it has are below, marked "
                       "`(from_graph)` where they differ from the Keras Estimator's):\n")
            out += [f"- `{call}`: {why}" for call, why in PENDING]
        missing = [m for m in REFERENCE_API[framework] if m.missing]
        for method in REFERENCE_API[framework]:
            if method.missing:
                continue
            where = method.target.replace(":", ".")
            out.append(f"\n### `{method.call}`\n")
            facts = [f"Orca: `{where}`"]
            if method.args:
                facts.append(f"positional: {method.positional}" if method.positional else "keyword arguments")
            if method.note:
                facts.append(method.note)
            out.append("; ".join(facts) + ".")
            if method.args:
                out += ["", "| reference argument | Orca | reason, what to do |", "|---|---|---|"]
                out += [_row(a) for a in method.args]
        if missing:
            out += ["\n### Not in Orca\n", "| reference call | what to do |", "|---|---|"]
            out += [f"| `{m.call}` | {_cell(m.note)} |" for m in missing]
    return "\n".join(out) + "\n"
