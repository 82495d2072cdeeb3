"""The errors of the runner (`RunnerError` and below) and of the CLI wrapper (`CkptOptError` and below).

Every message names the model file and the metadata key, node or flag it is about.
"""

from __future__ import annotations

import re
from typing import Optional


class RunnerError(Exception):
    """A model cannot be run under its recorded profile, or a run failed."""

    def __reduce__(self):  # picklable across processes, whatever the subclass's constructor takes
        return (type(self), getattr(self, "_args", self.args))


class NoProfile(RunnerError):
    """The model records no deployment profile, or lacks one of its keys."""

    def __init__(self, path: str, keys: list[str]):
        self.path = path
        self.keys = list(keys)
        self.key = self.keys[0]
        self._args = (path, keys)
        super().__init__(
            f"{path}: no deployment profile: metadata_props lack {', '.join(f'`{k}`' for k in self.keys)}; "
            "run a model written by ckpt-opt (`ckpt-opt MODEL --ceiling SIZE -o OUT`)"
        )


class InvalidProfile(RunnerError):
    """A recorded profile value the runner cannot honour (bad value, unknown key, unsafe cap)."""

    def __init__(self, path: str, key: str, value: Optional[str], why: str):
        self.path, self.key, self.value = path, key, value
        self._args = (path, key, value, why)
        shown = "" if value is None else f" = `{value}`"
        super().__init__(f"{path}: `{key}`{shown}: {why}")


class MalformedModel(RunnerError):
    """The file is not a protobuf ModelProto the metadata reader can walk."""


class OrtVersionMismatch(RunnerError):
    """The installed onnxruntime is not the version the profile was measured on."""

    def __init__(self, path: str, recorded: str, installed: str):
        self.path, self.recorded, self.installed = path, recorded, installed
        self._args = (path, recorded, installed)
        super().__init__(
            f"{path}: `ckpt-opt.profile.ort_version` = `{recorded}` but onnxruntime {installed} is installed; "
            f"the ceiling holds only on the version it was measured on: pip install onnxruntime=={recorded}"
        )


class ProviderMismatch(RunnerError):
    """The recorded execution provider is not available, not requested, or not the one ORT chose."""

    def __init__(self, path: str, recorded: str, why: str):
        self.path, self.recorded = path, recorded
        self._args = (path, recorded, why)
        super().__init__(f"{path}: `ckpt-opt.profile.execution_provider` = `{recorded}`: {why}")


class CeilingExceeded(RunnerError):
    """ONNX Runtime could not allocate under the arena cap.

    `message` is ORT's own (it names the node), `node` and `op` are parsed from it when present,
    `step` is the 1-based step (0: while the session was created), `cap_bytes` the arena cap.
    """

    def __init__(self, path: str, cap_bytes: int, step: int, message: str, cap_key: str = "ckpt-opt.arena_cap_bytes"):
        self.path, self.cap_bytes, self.step, self.message = path, cap_bytes, step, message
        self._args = (path, cap_bytes, step, message, cap_key)
        m = re.search(r"running (\S+) node\. Name:'([^']*)'", message)
        self.op = m.group(1) if m else None
        self.node = m.group(2) if m else None
        where = "creating the session" if step == 0 else f"step {step}"
        at = f" at node `{self.node}` ({self.op})" if m else ""
        super().__init__(
            f"{path}: {where} exceeded the arena cap `{cap_key}` = {cap_bytes} B{at}: {message}"
        )


class CkptOptError(Exception):
    """The ckpt-opt binary failed. `code` is its exit status (None: it did not run), `stderr` its
    diagnostics, `receipt` the receipt it wrote (exit 2 and 3), else None."""

    code: Optional[int] = None

    def __init__(self, message: str, *, code: Optional[int] = None, stderr: str = "", receipt: Optional[dict] = None):
        if code is not None:
            self.code = code
        self.message, self.stderr, self.receipt = message, stderr, receipt
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild_cli_error, (type(self), self.message, self.code, self.stderr, self.receipt))


class InvalidInput(CkptOptError):
    """Exit 1: a bad flag, model file or --dim binding."""

    code = 1


class CeilingCannotBeMet(CkptOptError):
    """Exit 2: no plan fits the ceiling; the receipt holds the diagnosis."""

    code = 2


class ValidationFailed(CkptOptError):
    """Exit 3: the rewritten graph's outputs differ, or its measured total is above the ceiling."""

    code = 3


class CouldNotValidate(CkptOptError):
    """Exit 4: no ONNX Runtime, or one without the model's ops."""

    code = 4


def _rebuild_cli_error(cls, message, code, stderr, receipt):
    return cls(message, code=code, stderr=stderr, receipt=receipt)
