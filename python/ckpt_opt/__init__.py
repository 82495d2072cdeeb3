"""ckpt-opt for Python: run a rewritten ONNX training graph under the memory ceiling it records
(`Session`), measure its arena need (`ckpt_opt.measure`), and drive the `ckpt-opt` binary
(`optimize`, `frontier`, `capacity`, `buckets`)."""

from .cli import buckets, capacity, frontier, optimize
from .errors import (
    CeilingCannotBeMet,
    CeilingExceeded,
    CkptOptError,
    CouldNotValidate,
    InvalidInput,
    InvalidProfile,
    MalformedModel,
    NoProfile,
    OrtVersionMismatch,
    ProviderMismatch,
    RunnerError,
    ValidationFailed,
)
from .profile import Profile, cuda_provider_options, read_metadata, read_profile
from .session import DeviceBuffer, Session

__all__ = [
    "Session",
    "DeviceBuffer",
    "Profile",
    "read_metadata",
    "read_profile",
    "cuda_provider_options",
    "RunnerError",
    "NoProfile",
    "InvalidProfile",
    "MalformedModel",
    "OrtVersionMismatch",
    "ProviderMismatch",
    "CeilingExceeded",
    "optimize",
    "frontier",
    "capacity",
    "buckets",
    "CkptOptError",
    "InvalidInput",
    "CeilingCannotBeMet",
    "ValidationFailed",
    "CouldNotValidate",
]
