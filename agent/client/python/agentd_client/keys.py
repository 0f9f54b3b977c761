"""Canonical state keys: format, parse, byte size.

The grammar is the daemon's (``agent/state/keys.ts``); a key this module
accepts the daemon accepts, and the reasons for rejecting one are the same
(code ``ERR_KEY_INVALID``)::

    key       = namespace "/" fqn ":" role "@[" dims "]/[" dims "]:" dtype "#v" version
    namespace = segment *( "/" segment )          ; job/model, may contain "/"
    fqn       = segment                           ; fully-qualified tensor name, no "/"
    segment   = 1*( ALPHA / DIGIT / "_" / "-" / "." )
    role      = "param" / "grad" / "buffer" / "optim." 1*( ALPHA / DIGIT / "_" )
    dims      = [ uint *( "," uint ) ]            ; offsets, then the local shape
    dtype     = "bool" / "u8" / "i8" / "i16" / "i32" / "i64" / "f16" / "bf16"
              / "f32" / "f64" / "f8_e4m3" / "f8_e5m2"
    version   = uint
    uint      = "0" / %x31-39 *DIGIT              ; no leading zeros

Offsets are the chunk's global offsets, the shape its local shape; both have
the same rank (0 for a scalar, at most 8), every shape dimension is >= 1, the
whole key is at most 1024 characters, and the byte size is
``product(shape) * DTYPE_BYTES[dtype]``. Every number must be at most
2**53 - 1 (the daemon's integers are exact up to there).

Example: ``job42/actor/model.layers.3.mlp.up_proj.weight:param@[0,0]/[4096,1024]:bf16#v17``.
Same key means same bytes: data-parallel replicas that offload one chunk
under one key are stored once.
"""
import operator
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Tuple, Union

from .errors import AgentError

#: Bytes per element of every dtype a key may name.
DTYPE_BYTES: Dict[str, int] = {
    "bool": 1, "u8": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "f8_e4m3": 1, "f8_e5m2": 1,
}

#: Key dtype of each torch dtype, by ``str(torch_dtype)`` so that this module
#: never imports torch. Torch dtypes missing here (complex, uint16, ...) have
#: no key dtype and are rejected.
TORCH_DTYPES: Dict[str, str] = {
    "torch.bool": "bool", "torch.uint8": "u8", "torch.int8": "i8", "torch.int16": "i16",
    "torch.int32": "i32", "torch.int64": "i64", "torch.float16": "f16", "torch.bfloat16": "bf16",
    "torch.float32": "f32", "torch.float64": "f64",
    "torch.float8_e4m3fn": "f8_e4m3", "torch.float8_e5m2": "f8_e5m2",
}

MAX_KEY_LENGTH = 1024
MAX_RANK = 8
MAX_SAFE_INTEGER = 2**53 - 1

_SEGMENT = r"[A-Za-z0-9_.-]+"
_UINT = r"(?:0|[1-9][0-9]*)"
_DIMS = rf"(?:{_UINT}(?:,{_UINT})*)?"
_ROLE = r"(?:param|grad|buffer|optim\.[A-Za-z0-9_]+)"
_KEY = re.compile(
    rf"(?P<namespace>{_SEGMENT}(?:/{_SEGMENT})*)/(?P<fqn>{_SEGMENT}):(?P<role>{_ROLE})"
    rf"@\[(?P<offsets>{_DIMS})\]/\[(?P<shape>{_DIMS})\]:(?P<dtype>[a-z0-9_]+)#v(?P<version>{_UINT})")
_NAMESPACE = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*")
_FQN = re.compile(_SEGMENT)
_ROLE_ONLY = re.compile(_ROLE)


def key_dtype(dtype: object) -> str:
    """The key dtype for ``dtype``: a key dtype name (``"bf16"``) or a torch dtype (``torch.bfloat16``).

    Raises AgentError ``ERR_KEY_INVALID`` for anything else.
    """
    name = str(dtype)
    if name in DTYPE_BYTES:
        return name
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name]
    raise AgentError("ERR_KEY_INVALID", f"dtype {name!r} has no key dtype (one of {' '.join(DTYPE_BYTES)}, "
                                        f"or the torch dtypes {' '.join(TORCH_DTYPES)})")


@dataclass(frozen=True)
class StateKey:
    """One canonical key, validated at construction (AgentError ``ERR_KEY_INVALID`` otherwise).

    ``str(key)`` is its canonical text, what the agent stores it under.
    ``offsets`` and ``shape`` are element counts, ``nbytes`` is bytes.
    ``dtype`` may be given as a torch dtype; it is stored as the key dtype name.
    """

    namespace: str
    fqn: str
    role: str
    offsets: Tuple[int, ...]
    shape: Tuple[int, ...]
    dtype: str
    version: int

    def __post_init__(self) -> None:
        # Accept any iterable of integers (a list, torch.Size) but store tuples, so keys hash and compare.
        try:
            object.__setattr__(self, "offsets", tuple(_integer(d) for d in self.offsets))
            object.__setattr__(self, "shape", tuple(_integer(d) for d in self.shape))
            object.__setattr__(self, "version", _integer(self.version))
        except TypeError as err:
            raise _invalid(self.text, f"offsets, shape and version must be integers ({err})") from None
        object.__setattr__(self, "dtype", key_dtype(self.dtype))
        problem = self._problem()
        if problem is not None:
            raise _invalid(self.text, problem)

    @property
    def text(self) -> str:
        """The canonical text: ``<namespace>/<fqn>:<role>@[<offsets>]/[<shape>]:<dtype>#v<version>``."""
        return (f"{self.namespace}/{self.fqn}:{self.role}@[{','.join(map(str, self.offsets))}]"
                f"/[{','.join(map(str, self.shape))}]:{self.dtype}#v{self.version}")

    @property
    def nbytes(self) -> int:
        """Bytes of the chunk: product(shape) * bytes per element (1 element for a scalar)."""
        count = 1
        for d in self.shape:
            count *= d
        return count * DTYPE_BYTES[self.dtype]

    def with_version(self, version: int) -> "StateKey":
        """The same chunk at another version."""
        return StateKey(self.namespace, self.fqn, self.role, self.offsets, self.shape, self.dtype, version)

    def __str__(self) -> str:
        return self.text

    def _problem(self) -> Union[str, None]:
        if not isinstance(self.namespace, str) or _NAMESPACE.fullmatch(self.namespace) is None:
            return f'namespace {self.namespace!r} may only contain letters, digits, "_", "-", "." and "/" between non-empty parts'
        if not isinstance(self.fqn, str) or _FQN.fullmatch(self.fqn) is None:
            return f'fqn {self.fqn!r} may only contain letters, digits, "_", "-" and "." (no "/")'
        if not isinstance(self.role, str) or _ROLE_ONLY.fullmatch(self.role) is None:
            return f"role must be param, grad, buffer or optim.<name>, got {self.role!r}"
        if len(self.offsets) != len(self.shape):
            return f"offsets have rank {len(self.offsets)} but the shape has rank {len(self.shape)}"
        if len(self.shape) > MAX_RANK:
            return f"rank {len(self.shape)} exceeds {MAX_RANK}"
        if any(d < 0 for d in self.offsets) or self.version < 0:
            return "offsets and version must be non-negative"
        if any(d < 1 for d in self.shape):
            return "every shape dimension must be >= 1"
        if any(n > MAX_SAFE_INTEGER for n in (self.version, self.nbytes, *self.offsets)):
            return "a number is too large"
        if len(self.text) > MAX_KEY_LENGTH:
            return f"length must be 1..{MAX_KEY_LENGTH}"
        return None


def format_key(namespace: str, fqn: str, *, role: str = "param", offsets: Union[Iterable[int], None] = None,
               shape: Iterable[int], dtype: object, version: int) -> str:
    """The canonical text of a chunk; ``offsets`` default to zeros of the shape's rank.

    ``dtype`` is a key dtype name or a torch dtype. Raises AgentError ``ERR_KEY_INVALID``.
    """
    dims = tuple(shape)
    return StateKey(namespace, fqn, role, tuple(offsets) if offsets is not None else (0,) * len(dims),
                    dims, key_dtype(dtype), version).text


def parse_key(text: str) -> StateKey:
    """Parses a canonical key; AgentError ``ERR_KEY_INVALID`` (status None) with the reason otherwise."""
    if not isinstance(text, str):
        raise _invalid(text, "a key must be a string")
    if len(text) == 0 or len(text) > MAX_KEY_LENGTH:
        raise _invalid(text, f"length must be 1..{MAX_KEY_LENGTH}")
    m = _KEY.fullmatch(text)
    if m is None:
        raise _invalid(text, _explain_mismatch(text))
    if m["dtype"] not in DTYPE_BYTES:
        raise _invalid(text, f'unknown dtype "{m["dtype"]}" (one of {" ".join(DTYPE_BYTES)})')
    return StateKey(m["namespace"], m["fqn"], m["role"], _split_dims(m["offsets"]), _split_dims(m["shape"]),
                    m["dtype"], int(m["version"]))


def _integer(value: object) -> int:
    """An exact integer (int, numpy/torch integer scalars); TypeError for bool, float, str."""
    if isinstance(value, bool):
        raise TypeError(f"{value!r} is a bool")
    return operator.index(value)  # type: ignore[arg-type]


def _split_dims(text: str) -> Tuple[int, ...]:
    return tuple(int(d) for d in text.split(",")) if text else ()


def _invalid(text: object, reason: str) -> AgentError:
    shown = text[:117] + "..." if isinstance(text, str) and len(text) > 120 else text
    return AgentError("ERR_KEY_INVALID", f"invalid state key {shown!r}: {reason}")


def _explain_mismatch(text: str) -> str:
    """Names the first part of the grammar that ``text`` breaks, for the error message."""
    colon = text.find(":")
    if colon < 0:
        return "expected <namespace>/<fqn>:<role>@[offsets]/[shape]:<dtype>#v<version>"
    path = text[:colon]
    if "/" not in path:
        return 'missing namespace: expected <namespace>/<fqn> before the first ":"'
    if _NAMESPACE.fullmatch(path) is None:
        return f'namespace/fqn "{path}" may only contain letters, digits, "_", "-", "." and "/" between non-empty parts'
    rest = text[colon + 1:]
    role = re.match(rf"{_ROLE}@", rest)
    if role is None:
        return f'role must be param, grad, buffer or optim.<name> followed by "@", got "{rest.split("@")[0]}"'
    after_role = rest[role.end():]
    if re.match(rf"\[{_DIMS}\]/\[{_DIMS}\]:", after_role) is None:
        return "expected @[offsets]/[shape]: with comma-separated non-negative integers without leading zeros"
    if "#v" not in after_role:
        return "missing #v<version>"
    return "version must be a non-negative integer without leading zeros"
