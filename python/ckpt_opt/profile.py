"""Reading what a ckpt-opt output model records: its `metadata_props` and the deployment profile in them.

The metadata is read from the file's bytes with a minimal protobuf wire reader, before any
ONNX Runtime session exists (the session must be created after the arena is registered). The
reader walks ModelProto's top-level fields only: field 14 (`metadata_props`, repeated
`StringStringEntryProto{1: key, 2: value}`) is decoded, every other field is skipped by its wire
type without being copied, so a graph of gigabytes costs no memory (the file is memory-mapped).
A key recorded twice takes its last value, as protobuf's map semantics and ckpt-opt's reader do.

Profile keys: `ckpt-opt.profile.<setting>` (see `REQUIRED_PROFILE_KEYS`, `OPTIONAL_PROFILE_KEYS`),
`ckpt-opt.session_config.<entry>` (each passed to `SessionOptions.add_session_config_entry`), and
the model-level numbers `ckpt-opt.arena_cap_bytes` (the arena's cap, load included),
`ckpt-opt.caller_bytes` (what the caller holds outside the arena), `ckpt-opt.initializer_bytes`
(constants the session holds outside the arena), `ckpt-opt.ceiling_bytes` (their sum, checked
when all four are recorded) and `ckpt-opt.version`. An unknown
`ckpt-opt.profile.*` key is refused: a setting the runner does not know is one it cannot honour.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import Optional

from .errors import InvalidProfile, MalformedModel, NoProfile

PROFILE_PREFIX = "ckpt-opt.profile."
SESSION_CONFIG_PREFIX = "ckpt-opt.session_config."
ARENA_CAP_KEY = "ckpt-opt.arena_cap_bytes"
CEILING_KEY = "ckpt-opt.ceiling_bytes"
CALLER_KEY = "ckpt-opt.caller_bytes"
INITIALIZER_KEY = "ckpt-opt.initializer_bytes"
VERSION_KEY = "ckpt-opt.version"

REQUIRED_PROFILE_KEYS = (
    "graph_optimization_level",
    "enable_mem_pattern",
    "arena_extend_strategy",
    "execution_provider",
    "caller_outputs",
    "intra_op_num_threads",
    "steps",
    "ort_version",
)
OPTIONAL_PROFILE_KEYS = ("initial_chunk_size_bytes", "offline_optimization_level", "cudnn_conv_algo_search")

OPT_LEVELS = ("disable", "basic", "extended", "all")
EXTEND_STRATEGIES = {"kNextPowerOfTwo": 0, "kSameAsRequested": 1}
PROVIDERS = ("cpu", "cuda")
CALLER_OUTPUTS = ("released", "held", "bound")
CUDNN_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")

# OrtArenaCfg's initial_chunk_size_bytes is a C int in ORT (the Python binding refuses 2**31), so the
# largest first region is INT_MAX rounded down to the arena's 256-byte allocation unit.
MAX_INITIAL_CHUNK = (2**31 - 1) // 256 * 256

_METADATA_FIELD = 14


@dataclass(frozen=True)
class Profile:
    """The deployment profile and the numbers a model records; `path` is the file it came from."""

    path: str
    graph_optimization_level: str
    enable_mem_pattern: bool
    arena_extend_strategy: str
    execution_provider: str
    caller_outputs: str
    intra_op_num_threads: int
    steps: int
    ort_version: str
    initial_chunk_size_bytes: Optional[int] = None
    offline_optimization_level: Optional[str] = None
    cudnn_conv_algo_search: Optional[str] = None
    session_config: dict = field(default_factory=dict)
    arena_cap_bytes: Optional[int] = None
    ceiling_bytes: Optional[int] = None
    caller_bytes: Optional[int] = None
    initializer_bytes: Optional[int] = None
    version: Optional[str] = None
    metadata: dict = field(default_factory=dict)

    @property
    def arena_extend_strategy_code(self) -> int:
        """OrtArenaCfg's `arena_extend_strategy`: 0 kNextPowerOfTwo, 1 kSameAsRequested."""
        return EXTEND_STRATEGIES[self.arena_extend_strategy]

    @property
    def entries(self) -> dict:
        """The `ckpt-opt.profile.*` and `ckpt-opt.session_config.*` entries as recorded."""
        return {k: v for k, v in self.metadata.items() if k.startswith((PROFILE_PREFIX, SESSION_CONFIG_PREFIX))}


def read_metadata(path: str | os.PathLike) -> dict:
    """The model's `metadata_props` as a dict of strings."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return {}
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _read_model_metadata(mm, size, path)


def _varint(buf, pos: int, end: int, path: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise MalformedModel(f"{path}: truncated varint at byte {pos}; not an ONNX model?")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise MalformedModel(f"{path}: varint longer than 10 bytes at byte {pos}; not an ONNX model?")


def _fields(buf, start: int, end: int, path: str):
    """Yields (field number, wire type, value or (offset, length)) of one message."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos, end, path)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise MalformedModel(f"{path}: field number 0 at byte {pos}; not an ONNX model?")
        if wire == 0:
            value, pos = _varint(buf, pos, end, path)
            yield number, wire, value
            continue
        if wire == 1:
            length = 8
        elif wire == 5:
            length = 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end, path)
        else:
            raise MalformedModel(f"{path}: wire type {wire} (field {number}) at byte {pos}; not an ONNX model?")
        if pos + length > end:
            raise MalformedModel(
                f"{path}: field {number} of {length} B at byte {pos} runs past the end ({end} B); truncated file?"
            )
        yield number, wire, (pos, length)
        pos += length


def _read_model_metadata(buf, size: int, path: str) -> dict:
    out: dict = {}
    for number, wire, value in _fields(buf, 0, size, path):
        if number != _METADATA_FIELD:
            continue
        if wire != 2:
            raise MalformedModel(f"{path}: metadata_props (field 14) has wire type {wire}, expected 2")
        start, length = value
        entry = bytes(buf[start : start + length])
        key = val = ""
        for n, w, v in _fields(entry, 0, length, path):
            if w == 2 and n in (1, 2):
                s, ln = v
                try:
                    text = entry[s : s + ln].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise MalformedModel(f"{path}: metadata_props entry at byte {start} is not UTF-8: {e}") from None
                if n == 1:
                    key = text
                else:
                    val = text
        out[key] = val
    return out


def read_profile(path: str | os.PathLike, also_required: tuple = ()) -> Profile:
    """The profile `path` records. NoProfile names every missing required key (the profile's, then
    `also_required`); InvalidProfile names a bad one."""
    path = os.fspath(path)
    md = read_metadata(path)
    missing = [k for k in also_required if k not in md]
    missing += [PROFILE_PREFIX + k for k in REQUIRED_PROFILE_KEYS if PROFILE_PREFIX + k not in md]
    if missing:
        raise NoProfile(path, missing)
    known = set(REQUIRED_PROFILE_KEYS) | set(OPTIONAL_PROFILE_KEYS)
    for k in md:
        if k.startswith(PROFILE_PREFIX) and k[len(PROFILE_PREFIX) :] not in known:
            raise InvalidProfile(
                path, k, md[k], f"unknown profile setting (known: {', '.join(sorted(known))}); upgrade ckpt_opt"
            )

    def get(short: str) -> Optional[str]:
        return md.get(PROFILE_PREFIX + short)

    def choice(short: str, allowed) -> str:
        v = get(short)
        if v not in allowed:
            raise InvalidProfile(path, PROFILE_PREFIX + short, v, f"expected one of {', '.join(allowed)}")
        return v

    def count(key: str, lo: int, hi: Optional[int], value: Optional[str]) -> int:
        try:
            n = int(value, 10)
        except (TypeError, ValueError):
            n = None
        if n is None or n < lo or (hi is not None and n > hi) or not value.isdigit():
            rng = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            raise InvalidProfile(path, key, value, f"expected a whole number from {rng}")
        return n

    def number(key: str) -> Optional[int]:
        return None if key not in md else count(key, 0, None, md[key])

    mem_pattern = choice("enable_mem_pattern", ("true", "false")) == "true"
    chunk_raw = get("initial_chunk_size_bytes")
    if chunk_raw is None or chunk_raw == "default":
        chunk = None
    elif chunk_raw == "arena_budget":
        raise InvalidProfile(
            path,
            PROFILE_PREFIX + "initial_chunk_size_bytes",
            chunk_raw,
            "a written model records the first region in bytes; rewrite the model with ckpt-opt",
        )
    else:
        chunk = count(PROFILE_PREFIX + "initial_chunk_size_bytes", 1, None, chunk_raw)
    offline = get("offline_optimization_level")
    if offline is not None:
        offline = choice("offline_optimization_level", OPT_LEVELS)
    cudnn = get("cudnn_conv_algo_search")
    if cudnn is not None:
        cudnn = choice("cudnn_conv_algo_search", CUDNN_SEARCH)
    deployment = {k: number(k) for k in (CEILING_KEY, CALLER_KEY, INITIALIZER_KEY, ARENA_CAP_KEY)}
    if None not in deployment.values():
        parts = deployment[CALLER_KEY] + deployment[INITIALIZER_KEY] + deployment[ARENA_CAP_KEY]
        if deployment[CEILING_KEY] != parts:
            raise InvalidProfile(
                path, CEILING_KEY, md[CEILING_KEY],
                f"is not `{CALLER_KEY}` + `{INITIALIZER_KEY}` + `{ARENA_CAP_KEY}` = {parts}",
            )
    return Profile(
        path=path,
        graph_optimization_level=choice("graph_optimization_level", OPT_LEVELS),
        enable_mem_pattern=mem_pattern,
        arena_extend_strategy=choice("arena_extend_strategy", tuple(EXTEND_STRATEGIES)),
        execution_provider=choice("execution_provider", PROVIDERS),
        caller_outputs=choice("caller_outputs", CALLER_OUTPUTS),
        intra_op_num_threads=count(PROFILE_PREFIX + "intra_op_num_threads", 1, 1024, get("intra_op_num_threads")),
        steps=count(PROFILE_PREFIX + "steps", 1, 100, get("steps")),
        ort_version=get("ort_version"),
        initial_chunk_size_bytes=chunk,
        offline_optimization_level=offline,
        cudnn_conv_algo_search=cudnn,
        session_config={
            k[len(SESSION_CONFIG_PREFIX) :]: v for k, v in sorted(md.items()) if k.startswith(SESSION_CONFIG_PREFIX)
        },
        arena_cap_bytes=number(ARENA_CAP_KEY),
        ceiling_bytes=number(CEILING_KEY),
        caller_bytes=number(CALLER_KEY),
        initializer_bytes=number(INITIALIZER_KEY),
        version=md.get(VERSION_KEY),
        metadata=md,
    )


def arena_cfg_entries(profile: Profile, arena_cap_bytes: int) -> dict:
    """The OrtArenaCfg entries of the CPU env arena: `max_mem`, the extend strategy, and the first region
    as recorded, clamped to `MAX_INITIAL_CHUNK` (ORT holds it in a C int; a larger region cannot be asked for)."""
    entries = {"max_mem": int(arena_cap_bytes), "arena_extend_strategy": profile.arena_extend_strategy_code}
    if profile.initial_chunk_size_bytes is not None:
        entries["initial_chunk_size_bytes"] = min(profile.initial_chunk_size_bytes, MAX_INITIAL_CHUNK)
    return entries


def cuda_provider_options(profile: Profile, arena_cap_bytes: Optional[int] = None, device_id: int = 0) -> dict:
    """CUDAExecutionProvider options for `profile`: the device arena capped at the arena cap (the recorded
    one unless `arena_cap_bytes` is given), extending as recorded, cuDNN's algorithm search as recorded
    (HEURISTIC when not recorded)."""
    cap = profile.arena_cap_bytes if arena_cap_bytes is None else arena_cap_bytes
    if cap is None:
        raise NoProfile(profile.path, [ARENA_CAP_KEY])
    return {
        "device_id": int(device_id),
        "gpu_mem_limit": int(cap),
        "arena_extend_strategy": profile.arena_extend_strategy,
        "cudnn_conv_algo_search": profile.cudnn_conv_algo_search or "HEURISTIC",
    }
