"""The runner: an ONNX Runtime session built exactly as a ckpt-opt output model records, under its arena cap.

Invariants:
- a session is never created before its arena cap is in force: on CPU the env arena is registered
  with `max_mem` = the cap and then checked by `arena_probe` (ORT silently runs uncapped when
  session load takes more than the cap); on CUDA the provider's `gpu_mem_limit` is the cap and
  ORT's choice of provider is checked after creation;
- `Session.run` returns outputs in buffers the runner owns, and after it returns the arena holds
  nothing of the step except what the recorded `caller_outputs` says the profile holds (`held`: the
  last step's ORT outputs, until the next step returns).
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import onnxruntime as ort

from .arena_probe import probe_env_arena
from .errors import CeilingExceeded, InvalidProfile, OrtVersionMismatch, ProviderMismatch, RunnerError
from .profile import ARENA_CAP_KEY, Profile, arena_cfg_entries, cuda_provider_options, read_profile

_OPT_LEVEL = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_EP = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_CAPPED_CUDA_OPTIONS = ("gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search")
NUMPY_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}
_ALLOC_FAILURE = ("Failed to allocate", "Available memory")

# Registration of the env arena and creation of the session on it happen under this lock, so that no
# other Session of this process registers its arena in between.
_REGISTRATION = threading.Lock()


@dataclass(frozen=True)
class DeviceBuffer:
    """A caller-owned device buffer for `Session.run_bound`: a raw pointer with its shape and dtype.

    `DeviceBuffer.of(t)` takes a contiguous torch tensor (or anything with `data_ptr()`, `shape`,
    `dtype` and `device`) without importing torch."""

    ptr: int
    shape: tuple
    dtype: Any
    device_type: str = "cuda"
    device_id: int = 0

    @classmethod
    def of(cls, tensor) -> "DeviceBuffer":
        if hasattr(tensor, "is_contiguous") and not tensor.is_contiguous():
            raise RunnerError("DeviceBuffer.of: the tensor is not contiguous; call .contiguous() first")
        name = str(tensor.dtype).replace("torch.", "")
        dtype = {"float32": np.float32, "float": np.float32, "float16": np.float16, "half": np.float16,
                 "float64": np.float64, "int64": np.int64, "long": np.int64, "int32": np.int32,
                 "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}.get(name)
        if dtype is None:
            raise RunnerError(f"DeviceBuffer.of: dtype {tensor.dtype} has no numpy element type ORT can bind")
        dev = tensor.device
        return cls(int(tensor.data_ptr()), tuple(int(d) for d in tensor.shape), dtype,
                   getattr(dev, "type", "cuda"), int(getattr(dev, "index", 0) or 0))


class Session:
    """An ONNX Runtime session of a ckpt-opt output model, run under the memory ceiling it records.

    `Session(path)` reads the model's `metadata_props` (without ORT), refuses a model without a
    profile (`NoProfile`), an installed onnxruntime other than the recorded one
    (`OrtVersionMismatch`) and a provider other than the recorded one (`ProviderMismatch`), and
    builds SessionOptions as recorded: optimization level, memory pattern, intra-op threads, every
    `ckpt-opt.session_config.*` entry, `log_severity_level` (3 unless given).

    CPU: the process-wide env arena is registered with `max_mem` = `arena_cap_bytes` (the recorded
    `ckpt-opt.arena_cap_bytes`; the keyword overrides it, for tests and bisection), the recorded
    extend strategy and first region (`initial_chunk_size_bytes`, which ORT holds in a C int: clamped
    to 2147483392), and the session is created with `session.use_env_allocators=1`. The cap is then
    checked: when what session load takes exceeds it, ORT 1.31.1 does not enforce it at all, so the
    session is refused with `CeilingExceeded` (step 0). A cap below 256 B is refused too (ORT
    reads a `max_mem` of 0 as no cap). `load_reserved_bytes` is what loading took from the cap.

    Several Sessions in one process (measured on ORT 1.31.1): `create_and_register_allocator`
    replaces the env's CPU arena, and a session keeps the arena that was registered when it was
    created. So each Session registers its own arena, under a process-wide lock, and two live
    Sessions have two arenas, each capped at its own model's cap; they never share one. The env
    keeps the last Session's arena registered after it is closed; a plain `InferenceSession`
    created later with `session.use_env_allocators=1` would share that arena (and its cap).

    CUDA: the provider is created with `cuda_provider_options(profile)` (`gpu_mem_limit` = the cap);
    if CUDA is not available, or ORT did not put it first, `ProviderMismatch` (never a fallback).

    `run(feeds)` returns runner-owned output buffers (allocated once, overwritten by the next
    step, like `.grad`); copy what must outlive the next step. Depending on the recorded
    `ckpt-opt.profile.caller_outputs`:
    - `bound`: every output is bound to its runner buffer and written in place (nothing of it in
      the arena); symbolic output dims are resolved from the fed inputs' dims of the same name;
    - `released`: ORT allocates the outputs in the arena; they are copied out and dropped before
      `run` returns;
    - `held`: as `released`, but this step's ORT outputs are kept until the next step returns, as
      the profile models `outs = sess.run(...)` in a loop. The need of held outputs keeps growing
      for a few steps (the arena's free chunks settle late), so the cap covers the recorded
      `ckpt-opt.profile.steps` and a longer loop only if that many steps were recorded.
    An allocation failure past the cap raises `CeilingExceeded` with ORT's message (naming the
    node), the cap and the step.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        arena_cap_bytes: Optional[int] = None,
        providers: Optional[list] = None,
        log_severity_level: int = 3,
    ):
        self._path = os.fspath(path)
        required = (ARENA_CAP_KEY,) if arena_cap_bytes is None else ()
        self._profile: Profile = read_profile(self._path, also_required=required)
        p = self._profile
        self._cap = int(p.arena_cap_bytes if arena_cap_bytes is None else arena_cap_bytes)
        self._cap_key = ARENA_CAP_KEY if arena_cap_bytes is None else "arena_cap_bytes (keyword)"
        if self._cap < 256:
            raise InvalidProfile(self._path, self._cap_key, str(self._cap),
                                 "a cap below 256 B holds nothing (ORT rounds caps down to 256 B, and reads a max_mem "
                                 "of 0 as no cap at all); the cap must be at least 256")
        if ort.__version__ != p.ort_version:
            raise OrtVersionMismatch(self._path, p.ort_version, ort.__version__)
        provider_options = _provider_options(p, providers, self._cap)
        self._device_id = int(provider_options.get("device_id", 0))
        so = _session_options(p, log_severity_level)
        self._load_reserved: Optional[int] = None
        try:
            if p.execution_provider == "cpu":
                self._sess = self._create_on_env_arena(so)
            else:
                self._sess = self._create_cuda(so, provider_options)
        except RunnerError:
            raise
        except Exception as e:
            raise self._classify(e, 0) from None
        self._inputs = {i.name: i for i in self._sess.get_inputs()}
        self._outputs = list(self._sess.get_outputs())
        self._binding = self._sess.io_binding()
        self._buffers: dict = {}
        self._held: Optional[list] = None
        self._step = 0
        self._lock = threading.Lock()

    # --- creation ---

    def _create_on_env_arena(self, so):
        so.add_session_config_entry("session.use_env_allocators", "1")
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        cfg = ort.OrtArenaCfg(arena_cfg_entries(self._profile, self._cap))
        with _REGISTRATION:
            ort.create_and_register_allocator(info, cfg)
            sess = ort.InferenceSession(self._path, so, providers=["CPUExecutionProvider"])
            taken = probe_env_arena(ort, self._cap)
        if taken is None:
            raise CeilingExceeded(
                self._path, self._cap, 0,
                "session load took more than the cap, and ONNX Runtime then enforces no cap at all "
                "(its count of the bytes left wraps around); refused rather than run uncapped",
                self._cap_key,
            )
        self._load_reserved = taken
        return sess

    def _create_cuda(self, so, options: dict):
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise ProviderMismatch(
                self._path, "cuda",
                f"CUDAExecutionProvider is not available (onnxruntime {ort.__version__} offers "
                f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu=={self._profile.ort_version}",
            )
        sess = ort.InferenceSession(self._path, so, providers=[("CUDAExecutionProvider", options)])
        chosen = sess.get_providers()
        if not chosen or chosen[0] != "CUDAExecutionProvider":
            raise ProviderMismatch(self._path, "cuda", f"ONNX Runtime created the session on {chosen}, not CUDA")
        return sess

    # --- properties ---

    @property
    def path(self) -> str:
        return self._path

    @property
    def arena_cap_bytes(self) -> int:
        """The cap in force (the recorded one unless overridden)."""
        return self._cap

    @property
    def ceiling_bytes(self) -> Optional[int]:
        return self._profile.ceiling_bytes

    @property
    def caller_bytes(self) -> Optional[int]:
        """What the recorded contract leaves to the caller, outside the arena: fed inputs and output buffers."""
        return self._profile.caller_bytes

    @property
    def initializer_bytes(self) -> Optional[int]:
        """Constants the session holds outside the arena, as recorded."""
        return self._profile.initializer_bytes

    @property
    def load_reserved_bytes(self) -> Optional[int]:
        """CPU: bytes of the cap that session load took (to 256 B), as the arena reported it."""
        return self._load_reserved

    @property
    def profile(self) -> dict:
        """The recorded `ckpt-opt.profile.*` and `ckpt-opt.session_config.*` entries."""
        return dict(self._profile.entries)

    @property
    def inputs(self) -> list:
        """The model's inputs as ONNX Runtime describes them (`name`, `type`, `shape`)."""
        return list(self._inputs.values())

    @property
    def input_names(self) -> list:
        return list(self._inputs)

    @property
    def output_names(self) -> list:
        return [o.name for o in self._outputs]

    @property
    def steps_run(self) -> int:
        return self._step

    # --- running ---

    def run(self, feeds: dict) -> dict:
        """One step: `{input name: array}` in, `{output name: runner buffer}` out (see the class doc)."""
        with self._lock:
            self._step += 1
            feeds = self._checked_feeds(feeds)
            mode = self._profile.caller_outputs
            cuda = self._profile.execution_provider == "cuda"
            if mode == "bound" and cuda:
                raise RunnerError(
                    f"{self._path}: `ckpt-opt.profile.caller_outputs` = `bound` on CUDA: bind device buffers "
                    "with Session.run_bound(inputs, outputs) and DeviceBuffer"
                )
            b = self._binding
            try:
                for name, arr in feeds.items():
                    b.bind_cpu_input(name, arr)
                if mode == "bound":
                    for o, buf in zip(self._outputs, self._bound_buffers(feeds)):
                        b.bind_output(o.name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
                    self._sess.run_with_iobinding(b)
                    b.clear_binding_outputs()
                else:
                    for o in self._outputs:
                        b.bind_output(o.name, "cuda" if cuda else "cpu", self._device_id)
                    self._sess.run_with_iobinding(b)
                    values = b.get_outputs()
                    b.clear_binding_outputs()
                    for o, v in zip(self._outputs, values):
                        self._copy_out(o.name, v, cuda)
                    if mode == "held":
                        self._held = list(values)  # drops the previous step's outputs
                    del values
            except RunnerError:
                raise
            except Exception as e:
                b.clear_binding_outputs()
                self._held = None
                raise self._classify(e, self._step) from None
            finally:
                b.clear_binding_inputs()
            return {o.name: self._buffers[o.name] for o in self._outputs}

    def run_bound(self, inputs: dict, outputs: dict) -> dict:
        """One step into caller-owned buffers, bound for this call and written in place.

        CPU: numpy arrays (outputs C-contiguous, writeable, of the output's dtype and shape).
        CUDA (or any device): `DeviceBuffer`s (a raw pointer, shape, dtype, device), bound with
        `bind_input`/`bind_output(name, device_type, device_id, element_type, shape, ptr)`; e.g.
        `DeviceBuffer.of(torch_tensor)`. Every output must be given. Measured on ORT 1.31.1 CPU: an
        output bound to a caller buffer is written there in place and takes nothing from the arena
        (`tests/test_session.py::test_bound_output_is_written_in_place`).
        """
        with self._lock:
            self._step += 1
            missing = [o.name for o in self._outputs if o.name not in outputs]
            unknown = [n for n in outputs if n not in self.output_names]
            if missing or unknown:
                raise RunnerError(f"{self._path}: run_bound: outputs missing {missing}, unknown {unknown}")
            b = self._binding
            try:
                for name, value in self._checked_feeds(inputs, device_ok=True).items():
                    if isinstance(value, DeviceBuffer):
                        b.bind_input(name, value.device_type, value.device_id, value.dtype, list(value.shape), value.ptr)
                    else:
                        b.bind_cpu_input(name, value)
                for o in self._outputs:
                    buf = outputs[o.name]
                    if isinstance(buf, DeviceBuffer):
                        b.bind_output(o.name, buf.device_type, buf.device_id, buf.dtype, list(buf.shape), buf.ptr)
                        continue
                    want = _dtype(o, self._path)
                    if not isinstance(buf, np.ndarray) or buf.dtype != want or not buf.flags.c_contiguous \
                            or not buf.flags.writeable:
                        raise RunnerError(
                            f"{self._path}: run_bound: output `{o.name}` needs a writeable C-contiguous numpy "
                            f"array of {np.dtype(want).name} (or a DeviceBuffer)"
                        )
                    b.bind_output(o.name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
                self._sess.run_with_iobinding(b)
            except RunnerError:
                raise
            except Exception as e:
                raise self._classify(e, self._step) from None
            finally:
                b.clear_binding_outputs()
                b.clear_binding_inputs()
            return outputs

    def close(self) -> None:
        """Drops the ORT session, its held outputs and the runner buffers."""
        self._held = None
        self._buffers = {}
        self._binding = None
        self._sess = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- helpers ---

    def _checked_feeds(self, feeds: dict, device_ok: bool = False) -> dict:
        missing = [n for n in self._inputs if n not in feeds]
        unknown = [n for n in feeds if n not in self._inputs]
        if missing or unknown:
            raise RunnerError(
                f"{self._path}: feeds must name every input exactly: missing {missing}, unknown {unknown}"
            )
        out = {}
        for name, meta in self._inputs.items():
            value = feeds[name]
            if device_ok and isinstance(value, DeviceBuffer):
                out[name] = value
                continue
            want = _dtype(meta, self._path)
            arr = np.asarray(value)
            if arr.dtype != want:
                raise RunnerError(
                    f"{self._path}: input `{name}` is {arr.dtype}, the model takes {np.dtype(want).name} "
                    "(no silent casts: convert it first)"
                )
            out[name] = np.ascontiguousarray(arr)
        return out

    def _bound_buffers(self, feeds: dict) -> list:
        dims: dict = {}
        for name, meta in self._inputs.items():
            for d, v in zip(meta.shape, feeds[name].shape):
                if isinstance(d, str):
                    dims.setdefault(d, v)
        bufs = []
        for o in self._outputs:
            shape = []
            for i, d in enumerate(o.shape):
                if isinstance(d, int):
                    shape.append(d)
                elif isinstance(d, str) and d in dims:
                    shape.append(dims[d])
                else:
                    raise RunnerError(
                        f"{self._path}: output `{o.name}` dim {i} (`{d}`) is not a dim of any input, so its buffer "
                        "cannot be allocated before the run; use run_bound with your own buffers"
                    )
            dtype = _dtype(o, self._path)
            buf = self._buffers.get(o.name)
            if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
                buf = self._buffers[o.name] = np.empty(shape, dtype=dtype)
            bufs.append(buf)
        return bufs

    def _copy_out(self, name: str, value, cuda: bool) -> None:
        shape = tuple(value.shape())
        dtype = NUMPY_DTYPES.get(value.data_type())
        if dtype is None:
            raise RunnerError(f"{self._path}: output `{name}` is {value.data_type()}, which the runner cannot copy")
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = self._buffers[name] = np.empty(shape, dtype=dtype)
        if cuda:
            np.copyto(buf, value.numpy())
        elif buf.nbytes:
            src = (ctypes.c_char * buf.nbytes).from_address(value.data_ptr())
            np.copyto(buf, np.frombuffer(src, dtype=dtype).reshape(shape))

    def _classify(self, error: Exception, step: int) -> Exception:
        message = str(error)
        if any(s in message for s in _ALLOC_FAILURE):
            return CeilingExceeded(self._path, self._cap, step, message, self._cap_key)
        where = "creating the session" if step == 0 else f"step {step}"
        return RunnerError(f"{self._path}: {where}: {message}")


def _dtype(meta, path: str):
    dtype = NUMPY_DTYPES.get(meta.type)
    if dtype is None:
        raise RunnerError(f"{path}: `{meta.name}` is {meta.type}, which the runner does not bind")
    return dtype


def _session_options(p: Profile, log_severity_level: int) -> "ort.SessionOptions":
    so = ort.SessionOptions()
    so.graph_optimization_level = _OPT_LEVEL[p.graph_optimization_level]
    so.enable_mem_pattern = p.enable_mem_pattern
    so.intra_op_num_threads = p.intra_op_num_threads
    so.log_severity_level = log_severity_level
    for key, value in p.session_config.items():
        so.add_session_config_entry(key, value)
    return so


def _provider_options(p: Profile, providers: Optional[list], cap: int) -> dict:
    """The recorded provider's options; a requested list must start with it (extra options may only add)."""
    recorded = _EP[p.execution_provider]
    options = cuda_provider_options(p, cap) if p.execution_provider == "cuda" else {}
    if providers is None:
        return options
    if not providers:
        raise ProviderMismatch(p.path, p.execution_provider, "an empty providers list was requested")
    first = providers[0]
    name, extra = (first, {}) if isinstance(first, str) else (first[0], dict(first[1]))
    if name != recorded:
        raise ProviderMismatch(p.path, p.execution_provider, f"{name} was requested; the ceiling holds on {recorded}")
    rest = [q if isinstance(q, str) else q[0] for q in providers[1:]]
    if any(r != "CPUExecutionProvider" for r in rest) or (rest and recorded == "CPUExecutionProvider"):
        raise ProviderMismatch(p.path, p.execution_provider, f"only {recorded} is run (requested {providers})")
    for key, value in extra.items():
        if key in _CAPPED_CUDA_OPTIONS and str(value) != str(options.get(key)):
            raise ProviderMismatch(
                p.path, p.execution_provider,
                f"provider option {key}={value} differs from the recorded {options.get(key)}",
            )
    if extra and recorded == "CPUExecutionProvider":
        raise ProviderMismatch(p.path, p.execution_provider, f"CPUExecutionProvider options {extra} are not recorded")
    options.update(extra)
    return options
