"""A safe, non-executable encoding of plain data and numeric arrays.

What goes over Orca's own sockets (epoch stats, lock-step sizes, barriers) and into Orca's
checkpoint files is encoded here instead of with :mod:`pickle`: decoding never imports a
module, calls a constructor or runs code, whoever wrote the bytes.

Supported values: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``,
``tuple``, ``dict`` (keys of those scalar types), numpy arrays and scalars of numeric,
boolean or fixed-width string dtypes, and array types a framework registers with
:func:`register_array_type` (e.g. ``torch.Tensor``, registered by ``orca.torch``).

Layout: a 4-byte big-endian length, a JSON description of the structure, then the raw bytes
of every array and ``bytes`` value, one after the other. The JSON holds plain scalars as they
are and every other value as a one-key object (``{"l": [...]}`` a list, ``{"a": [offset,
dtype, shape]}`` an array, ...). Decoding checks every offset, length, dtype and shape against
the bytes it was given and raises :class:`CodecError` on anything else.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CodecError", "decode", "encode", "register_array_type"]

_LEN = struct.Struct("!I")
#: numpy dtypes a decoder accepts: bool, integers, floats, complex, fixed-width bytes/unicode
_DTYPE = re.compile(r"^[<>|=]?(?:b1|[iu](?:1|2|4|8)|f(?:2|4|8|16)|c(?:8|16|32)|[SU]\d{1,9})$")
_MAX_DEPTH = 64


class CodecError(ValueError):
    """Bytes that are not a valid encoding, or a value this encoding cannot hold."""


@dataclass(frozen=True)
class _ArrayType:
    tag: str
    cls: type
    to_numpy: Callable[[Any], tuple[np.ndarray, str]]
    from_numpy: Callable[[np.ndarray, str], Any]


_BY_TAG: dict[str, _ArrayType] = {}


def register_array_type(tag: str, cls: type, to_numpy: Callable[[Any], tuple[np.ndarray, str]],
                        from_numpy: Callable[[np.ndarray, str], Any]) -> None:
    """Let :func:`encode` and :func:`decode` carry a framework's array type.

    Args:
        tag: a short name stored with each value (e.g. ``"torch"``).
        cls: the array type (instances and subclasses are encoded with ``to_numpy``).
        to_numpy: ``value -> (numpy array, meta string)``; the meta string (e.g. the original
            dtype) comes back to ``from_numpy``.
        from_numpy: ``(numpy array, meta) -> value``.
    """
    _BY_TAG[tag] = _ArrayType(tag, cls, to_numpy, from_numpy)


def encode(obj: Any) -> bytes:
    """Encode ``obj`` (plain data and arrays, see the module doc).

    Raises:
        CodecError: ``obj`` holds a value of another type (its type is named).
    """
    chunks: list[bytes | memoryview] = []
    offset = [0]

    def add(raw: bytes | memoryview) -> int:
        at = offset[0]
        chunks.append(raw)
        offset[0] += len(raw)
        return at

    def array(a: np.ndarray) -> list[Any]:
        if not _DTYPE.match(a.dtype.str):
            raise CodecError(f"cannot encode a numpy array of dtype {a.dtype}: only numbers, booleans and "
                             "fixed-width strings travel (no object arrays).")
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        return [add(a.reshape(-1).view(np.uint8).data if a.nbytes else b""), a.dtype.str, list(a.shape)]

    def walk(x: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise CodecError(f"cannot encode values nested deeper than {_MAX_DEPTH} levels.")
        if isinstance(x, np.ndarray):
            return {"a": array(x)}
        if isinstance(x, np.generic):
            return {"s": array(np.asarray(x))}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x if x is None or type(x) in (bool, int, float, str) else _plain(x)
        if isinstance(x, (bytes, bytearray, memoryview)):
            raw = bytes(x)
            return {"b": [add(raw), len(raw)]}
        if isinstance(x, list):
            return {"l": [walk(v, depth + 1) for v in x]}
        if isinstance(x, tuple):
            return {"t": [walk(v, depth + 1) for v in x]}
        if isinstance(x, dict):
            return {"d": [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in x.items()]}
        for kind in _BY_TAG.values():
            if isinstance(x, kind.cls):
                arr, meta = kind.to_numpy(x)
                return {"x": [kind.tag, str(meta), array(np.asarray(arr))]}
        raise CodecError(f"cannot encode a {type(x).__module__}.{type(x).__qualname__}: Orca sends and saves "
                         "only plain data (numbers, strings, bytes, lists, tuples, dicts) and numeric arrays.")

    head = json.dumps(walk(obj, 0), separators=(",", ":")).encode()
    return b"".join([_LEN.pack(len(head)), head, *chunks])


def _plain(x: Any) -> Any:
    """A subclass of a scalar type (an IntEnum, a str subclass) as the plain scalar."""
    for t in (bool, int, float, str):
        if isinstance(x, t):
            return t(x)
    return x  # pragma: no cover - only called for those types


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode what :func:`encode` wrote. Runs no code, whatever ``data`` holds.

    Raises:
        CodecError: ``data`` is not a valid encoding (truncated, bad offsets, a dtype other
            than numbers/booleans/fixed-width strings, an unregistered array type).
    """
    view = memoryview(data).cast("B")
    if len(view) < _LEN.size:
        raise CodecError(f"{len(view)} bytes are too short for an encoded value.")
    (n,) = _LEN.unpack_from(view)
    if n > len(view) - _LEN.size:
        raise CodecError(f"the encoded structure claims {n} bytes but only {len(view) - _LEN.size} follow.")
    try:
        tree = json.loads(bytes(view[_LEN.size:_LEN.size + n]))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CodecError(f"the encoded structure is not valid JSON ({exc}).") from None
    blob = view[_LEN.size + n:]

    def raw(at: Any, length: Any) -> memoryview:
        if not (_is_int(at) and _is_int(length) and 0 <= at and 0 <= length and at + length <= len(blob)):
            raise CodecError(f"a value points at bytes {at}..{at}+{length}, outside the {len(blob)} that follow.")
        return blob[at:at + length]

    def array(spec: Any) -> np.ndarray:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[1], str) and isinstance(spec[2], list)):
            raise CodecError("a malformed array entry.")
        at, dtype_str, shape = spec
        if not _DTYPE.match(dtype_str) or not all(_is_int(d) and d >= 0 for d in shape) or len(shape) > 32:
            raise CodecError(f"an array of dtype {dtype_str!r} and shape {shape!r} is not accepted.")
        dtype = np.dtype(dtype_str)
        count = 1
        for d in shape:
            count *= d
        if count * dtype.itemsize > len(blob):
            raise CodecError(f"an array of shape {shape} and dtype {dtype_str} needs more bytes than were sent.")
        buf = raw(at, count * dtype.itemsize)
        return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape).copy()

    def walk(node: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise CodecError(f"values nest deeper than {_MAX_DEPTH} levels.")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not (isinstance(node, dict) and len(node) == 1):
            raise CodecError(f"an unexpected {type(node).__name__} in the encoded structure.")
        (key, val), = node.items()
        if key == "l" and isinstance(val, list):
            return [walk(v, depth + 1) for v in val]
        if key == "t" and isinstance(val, list):
            return tuple(walk(v, depth + 1) for v in val)
        if key == "d" and isinstance(val, list):
            out = {}
            for item in val:
                if not (isinstance(item, list) and len(item) == 2):
                    raise CodecError("a malformed dict entry.")
                k = walk(item[0], depth + 1)
                if not isinstance(k, (type(None), bool, int, float, str, bytes, tuple)):
                    raise CodecError(f"a dict key of type {type(k).__name__} is not accepted.")
                try:
                    out[k] = walk(item[1], depth + 1)
                except TypeError:  # an unhashable tuple key (a tuple holding a list)
                    raise CodecError("an unhashable dict key.") from None
            return out
        if key == "b" and isinstance(val, list) and len(val) == 2:
            return bytes(raw(val[0], val[1]))
        if key == "a":
            return array(val)
        if key == "s":
            a = array(val)
            if a.shape != ():
                raise CodecError("a numpy scalar with a shape.")
            return a[()]
        if key == "x" and isinstance(val, list) and len(val) == 3 and isinstance(val[0], str):
            kind = _BY_TAG.get(val[0])
            if kind is None:
                raise CodecError(f"the data holds {val[0]!r} arrays; import the Orca package for that framework "
                                 f"(e.g. orca.{val[0]}) before reading it.")
            return kind.from_numpy(array(val[2]), str(val[1]))
        raise CodecError(f"an unknown entry {key!r} in the encoded structure.")

    return walk(tree, 0)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
