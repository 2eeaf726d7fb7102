"""XShards: a partitioned collection of shards (arrays, dicts of arrays, pandas frames, ...).

Three forms share one interface: :class:`~orca.core.data.SparkXShards` (an RDD, one or more
shards per partition), :class:`~orca.core.data.RayXShards` (one Ray object per shard) and
:class:`~orca.core.data.LocalXShards` (an in-process list). Build one with
:meth:`XShards.partition`, :meth:`XShards.from_spark_df`, the readers, or
:meth:`XShards.load_pickle`; the form follows the active Orca context unless ``backend=`` says.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from orca.core import _active
from orca.core.data import _structure as st

if TYPE_CHECKING:
    from orca.core.data._local import LocalXShards
    from orca.core.data._ray import RayXShards
    from orca.core.data._spark import SparkXShards

BACKENDS = ("spark", "ray", "local")
#: the XShards forms by name: each form's class registers itself (``class SparkXShards(XShards,
#: form="spark")``), so this base and the forms, each of which knows only itself, never import one another
_FORMS: dict[str, type[XShards]] = {}


def form_class(name: str) -> Any:
    """The XShards class of the form ``name`` (``"spark"``, ``"ray"`` or ``"local"``)."""
    return _FORMS[name]


def spark_context() -> Any:
    """The SparkContext of the active Orca context (starting one if none is active)."""
    return _active.current().spark_session().sparkContext


def resolve_backend(backend: str | None) -> str:
    """The XShards form to build: ``backend`` if given, else what the active context offers.

    Spark when an active Orca context has Spark running, Ray when its runtime is ``"ray"``,
    local otherwise.
    """
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not supported; use one of {BACKENDS} or None.")
        return backend
    ctx = _active.active()
    if ctx is None:
        return "local"
    if ctx.has_spark:
        return "spark"
    if ctx.runtime == "ray":
        return "ray"
    return "local"


def default_num_shards(backend: str) -> int:
    """Spark's default parallelism for Spark-backed shards, else 2."""
    if backend == "spark":
        return max(1, int(spark_context().defaultParallelism))
    return 2


class XShards(abc.ABC):
    """A distributed collection of shards with the same operations on every backend.

    Examples:
        >>> shards = XShards.partition({"x": np.ones((10, 3)), "y": np.zeros(10)}, num_shards=2)  # doctest: +SKIP
        >>> shards.transform_shard(lambda d: {**d, "x": d["x"] * 2}).collect()[0]["x"].shape  # doctest: +SKIP
        (5, 3)
    """

    def __init_subclass__(cls, form: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if form is not None:
            _FORMS[form] = cls

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def partition(data: Any, num_shards: int | None = None, backend: str | None = None) -> XShards:
        """Split ``data`` into ``num_shards`` shards of balanced contiguous row ranges.

        Args:
            data: an ndarray, a pandas DataFrame, or a dict/tuple/list (nested) of them; every
                leaf must have the same first dimension. Lists of scalars become ndarrays.
            num_shards: number of shards; default Spark's default parallelism, or 2.
            backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.

        Returns:
            An XShards whose shards keep the structure of ``data``.

        Raises:
            ValueError: leaves of different lengths (each path and length named), or
                ``num_shards`` < 1.
            TypeError: a leaf that is not an array.
        """
        data = st.as_arrays(data)
        total = st.check_same_length(data)
        form = resolve_backend(backend)
        n = default_num_shards(form) if num_shards is None else int(num_shards)
        if n < 1:
            raise ValueError(f"num_shards must be >= 1; got {num_shards!r}.")
        shards = [st.slice_rows(data, lo, hi) for lo, hi in st.balanced_ranges(total, n)]
        return XShards.from_list(shards, backend=form)

    @staticmethod
    def from_list(shards: Sequence[Any], backend: str | None = None) -> XShards:
        """Wrap already-made shards, one per partition.

        Args:
            shards: the shards.
            backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.

        Returns:
            An XShards holding exactly these shards, in order.
        """
        return form_class(resolve_backend(backend))._from_shards(list(shards))

    @staticmethod
    def from_ray_refs(refs: Sequence[Any]) -> RayXShards:
        """Wrap Ray ObjectRefs, one shard each."""
        return form_class("ray")(list(refs))

    @staticmethod
    def from_spark_df(df: Any, num_shards: int | None = None) -> SparkXShards:
        """Turn a Spark DataFrame into a SparkXShards of pandas DataFrames, one per partition.

        The conversion runs on the executors through Arrow; no row reaches the driver.

        Args:
            df: a ``pyspark.sql.DataFrame``.
            num_shards: repartition the DataFrame to this many partitions first.

        Returns:
            SparkXShards of pandas DataFrames (empty partitions give empty frames with the
            DataFrame's columns).
        """
        from orca.core.data._arrow import spark_df_to_pandas_rdd

        if num_shards is not None and num_shards != df.rdd.getNumPartitions():
            df = df.repartition(int(num_shards))
        return form_class("spark")(spark_df_to_pandas_rdd(df))

    @staticmethod
    def load_pickle(path: str, backend: str | None = None, *, allow_pickle: bool = False) -> XShards:
        """Load XShards written by :meth:`save_pickle`, one shard per file.

        Pickle files are executable: unpickling one runs whatever code it holds, on the driver
        or the executors. So this reads only what the caller vouches for with
        ``allow_pickle=True`` (files this job or you wrote, in storage no one else can write).
        For data others may touch, use :meth:`save` and :meth:`load` (Parquet and ``.npz``, data
        only).

        Args:
            path: a local directory or fsspec URL.
            backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.
            allow_pickle: must be ``True``: confirms the files are trusted.

        Raises:
            ValueError: ``allow_pickle`` is not ``True``.
            FileNotFoundError: ``path`` does not exist or holds no shard files.
        """
        if allow_pickle is not True:
            raise ValueError(f"XShards.load_pickle({path!r}) unpickles the files, which runs any code they hold; "
                             "pass allow_pickle=True if you trust them (you or this job wrote them, and no one "
                             "else can write there), or store shards as Parquet instead.")
        from orca.core.data._files import pickle_files, read_pickle_file

        return form_class(resolve_backend(backend))._build(read_pickle_file, pickle_files(path))

    # ------------------------------------------------------------------ per-form operations
    @abc.abstractmethod
    def transform_shard(self, fn: Callable[..., Any], *args: Any) -> XShards:
        """Apply ``fn(shard, *args)`` to every shard (lazily where the backend is lazy)."""

    @abc.abstractmethod
    def collect(self) -> list[Any]:
        """Return all shards to the driver, in partition order."""

    @abc.abstractmethod
    def num_partitions(self) -> int:
        """The number of partitions."""

    @abc.abstractmethod
    def num_rows_per_partition(self) -> list[int]:
        """Rows in each partition, computed where the data lives (see :meth:`__len__`)."""

    @abc.abstractmethod
    def repartition(self, num_partitions: int) -> XShards:
        """Re-split into ``num_partitions`` partitions, aware of what the shards hold.

        Arrays (and dicts/tuples/lists of them), pandas frames and lists are concatenated
        and re-split into balanced contiguous row ranges (row order is kept); other objects
        are redistributed as they are.
        """

    @abc.abstractmethod
    def zip(self, other: XShards) -> XShards:
        """Pair shards with those of ``other``: each new shard is ``(mine, theirs)``.

        Raises:
            ValueError: the two have different partition counts.
        """

    @abc.abstractmethod
    def cache(self) -> XShards:
        """Keep the shards in memory across uses; returns ``self``."""

    @abc.abstractmethod
    def uncache(self) -> XShards:
        """Release cached shards; returns ``self``."""

    @abc.abstractmethod
    def to_local(self) -> LocalXShards:
        """Bring every shard into this process (a collect)."""

    @abc.abstractmethod
    def to_ray(self) -> RayXShards:
        """Move the shards into Ray's object store, one object per shard."""

    @abc.abstractmethod
    def to_spark(self) -> SparkXShards:
        """Move the shards into a Spark RDD, one shard per partition."""

    @abc.abstractmethod
    def _first_map(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(first shard)`` computed where the shard lives (raises IndexError if empty)."""

    @abc.abstractmethod
    def _write_shards(self, path: str, safe: bool = False) -> None:
        """Write one file per shard under ``path`` (where the shards live): a pickle, or with
        ``safe`` Parquet / ``.npz`` (see :meth:`save`)."""

    # ------------------------------------------------------------------ shared operations
    def __len__(self) -> int:
        """Total rows: rows of arrays/frames, elements of lists, one per other object."""
        return int(sum(self.num_rows_per_partition()))

    def __getitem__(self, key: Any) -> XShards:
        """XShards of ``shard[key]`` (a dict key, a column or columns, a tuple index).

        Raises:
            KeyError: ``key`` is not in the (first) shard; the message names the available keys.
        """
        try:
            available = self._first_map(lambda s: st.missing_key(s, key))
        except IndexError:
            available = None
        if available is not None:
            raise KeyError(f"key {key!r} is not in the shards; available keys: {available}")
        return self.transform_shard(_getitem, key)

    def split(self) -> list[XShards]:
        """Split shards holding a tuple/list of k elements into k XShards.

        Raises:
            TypeError: the shards are not tuples or lists.
        """
        info = self._first_map(lambda s: len(s) if isinstance(s, (tuple, list)) else type(s).__name__)
        if isinstance(info, str):
            raise TypeError(f"split() needs shards that are tuples or lists; got {info}.")
        return [self.transform_shard(_getitem, i) for i in range(info)]

    def get_schema(self) -> dict[str, Any]:
        """Describe the shards (from the first one).

        Returns:
            For pandas shards ``{"type": "pandas", "columns": [...], "dtypes": {col: dtype}}``;
            for dicts of arrays ``{"type": "dict", "keys": [...], "shapes": {k: (None, ...)},
            "dtypes": {k: dtype}}`` (the row dimension is ``None``).
        """
        return self._first_map(st.shard_schema)

    def to_spark_df(self) -> Any:
        """Build a Spark DataFrame from shards of pandas frames or dicts of 1-D/N-D arrays.

        Runs through Arrow on the executors. N-D arrays become (nested) array columns.

        Returns:
            A ``pyspark.sql.DataFrame``.

        Raises:
            TypeError: shards of another kind.
        """
        from orca.core.data._arrow import shards_rdd_to_spark_df

        return shards_rdd_to_spark_df(self.to_spark().rdd)

    def save_pickle(self, path: str) -> None:
        """Write each shard to its own pickle file under ``path`` (local or fsspec URL).

        Files are ``part-<partition>-<index>.pkl``, written where the shards live. Pickles are
        executable: :meth:`load_pickle` reads them back only with ``allow_pickle=True``;
        :meth:`save` writes DataFrame and array shards as data only.
        """
        self._write_shards(path)

    def save(self, path: str) -> None:
        """Write each shard to its own file under ``path`` (local or fsspec URL), as data only.

        A pandas DataFrame shard becomes ``part-<partition>-<index>.parquet``; a numpy array, or a
        dict of string keys to numpy arrays, becomes ``part-<partition>-<index>.npz`` (numeric or
        fixed-width dtypes). Nothing is pickled: :meth:`load` reads the files back without running
        any code, so share them freely. Files are written where the shards live.

        Raises:
            TypeError: a shard of another kind, or an array of Python objects (the message
                names :meth:`save_pickle`, which stores anything, executable).
        """
        self._write_shards(path, safe=True)

    @staticmethod
    def load(path: str, backend: str | None = None) -> XShards:
        """Load XShards written by :meth:`save`, one shard per file (Parquet -> pandas DataFrame,
        ``.npz`` -> the array or dict of arrays). Reading runs no code from the files.

        Args:
            path: a local directory or fsspec URL.
            backend: ``"spark"``, ``"ray"`` or ``"local"``; default follows the active context.

        Raises:
            FileNotFoundError: ``path`` does not exist or holds no shard files (when it holds
                :meth:`save_pickle`'s pickles, the message says to use :meth:`load_pickle`).
        """
        from orca.core.data._files import read_safe_file, safe_files

        return form_class(resolve_backend(backend))._build(read_safe_file, safe_files(path))

    # ------------------------------------------------------------------ what each form gives
    @classmethod
    @abc.abstractmethod
    def _from_shards(cls, shards: list[Any]) -> XShards:
        """This form holding ``shards`` (made in this process), one per partition."""

    @classmethod
    @abc.abstractmethod
    def _build(cls, fn: Callable[[Any], Any], items: list[Any]) -> XShards:
        """This form with shard ``i`` = ``fn(items[i])``, computed where it keeps its shards (``fn``: a
        module-level function, e.g. a file reader; it travels to the executors or Ray workers)."""

    def _check_zip(self, other: XShards) -> None:
        if not isinstance(other, XShards):
            raise TypeError(f"zip() needs an XShards; got {type(other).__name__}.")
        mine, theirs = self.num_partitions(), other.num_partitions()
        if mine != theirs:
            raise ValueError(
                f"zip() needs XShards with the same number of partitions; this one has {mine}, "
                f"the other has {theirs}. Repartition one of them first."
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_partitions={self.num_partitions()})"


def _getitem(shard: Any, key: Any) -> Any:
    return shard[key]
