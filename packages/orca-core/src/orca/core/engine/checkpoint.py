"""Checkpoint files that hold data, not code.

A checkpoint is ``ORCA-CKPT`` and a version byte, then ``{"epoch": n, "state": state}`` in
:mod:`orca.core.codec`: numbers, strings, lists, dicts and arrays (numpy, or a framework's
tensors that its Orca package registered). Reading one runs no code, whoever wrote the file.

Orca wrote pickled checkpoints before; :func:`read_checkpoint` reads those only when the
caller says ``allow_pickle=True`` (unpickling runs whatever the file holds).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from orca.core.codec import CodecError, decode, encode

MAGIC = b"ORCA-CKPT\x01"
#: the first bytes of a pickle (protocol 2 and later)
_PICKLE = b"\x80"
#: what every "this is no checkpoint" error tells the user to do
_READ_FIX = "pass a file written by save_checkpoint() or ModelCheckpoint"


def write_checkpoint(path: str, epoch: int, state: Any) -> None:
    """Write ``state`` and ``epoch`` to ``path`` (local or fsspec URL), whole or not at all.

    The bytes go to a temporary file beside ``path`` first and are moved over it once
    complete, so a failure never leaves a half-written checkpoint under ``path``.

    Raises:
        orca.core.codec.CodecError: ``state`` holds a value that is not plain data or an array
            (the message names its type).
        OSError: ``path`` cannot be written (of the same type, naming the path).
    """
    import fsspec

    blob = MAGIC + encode({"epoch": int(epoch), "state": state})
    fs, target = fsspec.core.url_to_fs(path)
    tmp = f"{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(tmp, "wb") as fh:
            fh.write(blob)
        fs.mv(tmp, target)
    except BaseException as exc:
        if fs.exists(tmp):
            fs.rm(tmp)
        if isinstance(exc, OSError) and not exc.filename:
            raise
        if isinstance(exc, OSError):
            raise type(exc)(exc.errno, f"cannot write the checkpoint {path!r} ({exc.strerror or exc}); pass a path "
                            "in a writable directory") from exc
        raise


def read_checkpoint(path: str, allow_pickle: bool = False) -> tuple[int, Any]:
    """``(epoch, state)`` from a checkpoint at ``path`` (local or fsspec URL).

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
        return int(ckpt.get("epoch") or 0), ckpt["state"]
    if data.startswith(_PICKLE):
        if not allow_pickle:
            raise ValueError(f"{path!r} is a pickled checkpoint: loading it would run any code it holds. If you "
                             "wrote it yourself (an older Orca version), pass allow_pickle=True to "
                             "load_checkpoint; then save_checkpoint() writes it again in the safe format.")
        import cloudpickle

        ckpt = cloudpickle.loads(data)  # noqa: S301 - the caller vouched for this file (allow_pickle=True)
        return int(ckpt.get("epoch", 0)), ckpt["state"]
    raise ValueError(f"{path!r} is not an Orca checkpoint (it starts with {data[:12]!r}); {_READ_FIX} (a framework's own model file loads with load()).")
