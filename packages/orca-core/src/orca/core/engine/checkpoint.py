"""Checkpoint files that hold data, not code.

A checkpoint is ``ORCA-CKPT`` and a version byte, then ``{"epoch": n, "state": state}`` (and
``"meta"``: plain data about the fit that wrote it, such as its MLflow run) in
:mod:`orca.core.codec`: numbers, strings, lists, dicts and arrays (numpy, or a framework's
tensors that its Orca package registered). Reading one runs no code, whoever wrote the file.

Orca wrote pickled checkpoints before; :func:`read_checkpoint` reads those only when the
caller says ``allow_pickle=True`` (unpickling runs whatever the file holds).
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orca.core.codec import CodecError, decode, encode

MAGIC = b"ORCA-CKPT\x01"
#: the first bytes of a pickle (protocol 2 and later)
_PICKLE = b"\x80"
#: what every "this is no checkpoint" error tells the user to do
_READ_FIX = "pass a file written by save_checkpoint() or ModelCheckpoint"


def write_checkpoint(path: str, epoch: int, state: Any, meta: dict[str, Any] | None = None) -> None:
    """Write ``state`` and ``epoch`` (and ``meta``, plain data such as ``{"mlflow_run_id": ...}``,
    which :func:`read_checkpoint_meta` gives back) to ``path`` (local or fsspec URL), whole or not at all.

    The bytes go to a temporary file beside ``path`` first and are moved over it once
    complete, so a failure never leaves a half-written checkpoint under ``path``.

    Raises:
        orca.core.codec.CodecError: ``state`` holds a value that is not plain data or an array
            (the message names its type).
        OSError: ``path`` cannot be written (of the same type, naming the path).
    """
    blob = MAGIC + encode({"epoch": int(epoch), "state": state, **({"meta": dict(meta)} if meta else {})})
    with writing_file(path, "the checkpoint") as fh:
        fh.write(blob)


@contextmanager
def writing_file(path: str, what: str = "the file") -> Iterator[Any]:
    """A binary file handle for ``path`` (local or fsspec URL) that lands whole or not at all.

    The bytes go to a temporary file beside ``path``, moved over it when the block ends; if the
    block (or the move) fails, the temporary file is removed and whatever stood at ``path`` is
    untouched. An ``OSError`` is raised again naming ``what``, ``path`` and the fix.
    """
    import fsspec

    fs, target = fsspec.core.url_to_fs(path)
    tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(tmp, "wb") as fh:
            yield fh
        fs.mv(tmp, target)
    except BaseException as exc:
        if fs.exists(tmp):
            fs.rm(tmp)
        if isinstance(exc, OSError) and not exc.filename:
            raise
        if isinstance(exc, OSError):
            raise type(exc)(exc.errno, f"cannot write {what} {path!r} ({exc.strerror or exc}); pass a path "
                            "in a writable directory") from exc
        raise


def read_checkpoint(path: str, allow_pickle: bool = False) -> tuple[int, Any]:
    """``(epoch, state)`` from a checkpoint at ``path`` (local or fsspec URL).

    Args and errors as :func:`read_checkpoint_meta`, which also gives the checkpoint's meta.
    """
    epoch, state, _ = read_checkpoint_meta(path, allow_pickle=allow_pickle)
    return epoch, state


def read_checkpoint_meta(path: str, allow_pickle: bool = False) -> tuple[int, Any, dict[str, Any]]:
    """``(epoch, state, meta)`` from a checkpoint at ``path`` (local or fsspec URL); ``meta`` is
    what :func:`write_checkpoint` was given (``{}`` for none, and for older files).

    Args:
        path: a file written by :func:`write_checkpoint` (``Estimator.save_checkpoint``,
            ``ModelCheckpoint``).
        allow_pickle: also read a pickled checkpoint (older Orca versions). Unpickling runs any
            code the file holds: only for files you trust.

    Raises:
        ValueError: the file is a pickle and ``allow_pickle`` is False (the message names the
            flag), or it is not a checkpoint at all (or a damaged one).
        FileNotFoundError: there is no file at ``path``.
    """
    import fsspec

    try:
        with fsspec.open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no checkpoint at {path!r}; {_READ_FIX} (see latest_checkpoint(directory)).") from None
    if data.startswith(MAGIC):
        try:
            ckpt = decode(memoryview(data)[len(MAGIC):])
        except CodecError as exc:
            raise ValueError(f"{path!r} is a damaged Orca checkpoint ({exc}): it was cut short or changed; {_READ_FIX}, e.g. an earlier one.") from None
        if not (isinstance(ckpt, dict) and "state" in ckpt):
            raise ValueError(f"{path!r} is an Orca checkpoint file without a state; {_READ_FIX}.")
        meta = ckpt.get("meta")
        return int(ckpt.get("epoch") or 0), ckpt["state"], dict(meta) if isinstance(meta, dict) else {}
    if data.startswith(_PICKLE):
        if not allow_pickle:
            raise ValueError(f"{path!r} is a pickled checkpoint: loading it would run any code it holds. If you "
                             "wrote it yourself (an older Orca version), pass allow_pickle=True to "
                             "load_checkpoint; then save_checkpoint() writes it again in the safe format.")
        import cloudpickle

        ckpt = cloudpickle.loads(data)  # noqa: S301 - the caller vouched for this file (allow_pickle=True)
        return int(ckpt.get("epoch", 0)), ckpt["state"], {}
    raise ValueError(f"{path!r} is not an Orca checkpoint (it starts with {data[:12]!r}); {_READ_FIX} (a framework's own model file loads with load()).")


# --------------------------------------------------------------------------- a framework's model files
#: what every "this is no saved model" error tells the user to do
_MODEL_FIX = "pass the path the Estimator's save() wrote"


def require_model_file(path: str, exists: bool | None = None) -> None:
    """Raise a ``FileNotFoundError`` naming ``path`` and the fix unless a saved model is there.

    Args:
        path: what ``load(path)`` was given (local or fsspec URL).
        exists: whether the model is there, where the framework knows better (a TF checkpoint's
            ``.index``); ``None``: whether anything is at ``path``.
    """
    if exists is None:
        import fsspec

        fs, target = fsspec.core.url_to_fs(path)
        exists = fs.exists(target)
    if not exists:
        raise FileNotFoundError(f"no saved model at {path!r}; {_MODEL_FIX} (check the path).")


@contextmanager
def reading_model_file(path: str) -> Iterator[None]:
    """Around a framework's reader of a saved model: whatever it raises about the file's bytes (a
    truncated zip, a foreign file) becomes one ``ValueError`` naming ``path``, the reader's own
    words and the fix. Wrap the read alone: checks of what was read keep their own errors."""
    try:
        yield
    except Exception as exc:
        said = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ValueError(f"{path!r} is not a model saved by save(), or a damaged one ({type(exc).__name__}: {said}); "
                         f"{_MODEL_FIX}, or load_checkpoint() for an Orca checkpoint.") from exc


def check_writable(path: str) -> None:
    """Raise an ``OSError`` naming ``path`` and the fix when a local ``path`` cannot be written
    (a file where a parent directory should be, or a parent directory this process may not
    write to), before a framework's writer leaves half a file or a bare error. Remote URLs pass."""
    import fsspec

    fs, target = fsspec.core.url_to_fs(path)
    if "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        return
    parent = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(errno.ENOTDIR, f"cannot write {path!r}: {parent!r} is a file, not a directory; "
                                 "pass a path in a writable directory")
    if not os.access(parent, os.W_OK):
        raise PermissionError(errno.EACCES, f"cannot write {path!r}: the directory {parent!r} is not writable; "
                              "pass a path in a writable directory")
