"""Device profiles: peaks measured on the actual GPU (``traceadvisor calibrate``), replacing datasheet figures.

A profile is one JSON file::

    {
      "schema": "traceadvisor-device-profile/1",
      "device": {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
                 "compute_capability": "9.0", "total_memory_bytes": 85017853952},
      "measured": {"memory_bandwidth_gbs": 3012.5,
                   "flops": {"fp32": 5.1e13, "tf32": 3.9e14, "bf16": 7.4e14, "fp16": 7.5e14, "fp8": null}},
      "method": {"...": "free-form: kernels, sizes, repeats, clocks"},
      "torch": "2.11.0+cu130",
      "created": "2026-11-21T19:44:38+00:00"
    }

``device.name`` is ``torch.cuda.get_device_name()`` (the same string kineto writes into
``deviceProperties.name``), ``memory_bandwidth_gbs`` is in 10^9 bytes per second, and ``flops``
values are FLOP/s (operations per second for ``int8``) keyed by the dtypes of ``gpus.DTYPES``;
``null`` or a missing key means "not measured" and keeps the datasheet figure. Keys this version
does not know are kept in ``extra_flops`` and otherwise ignored, so a newer ``calibrate`` can
measure more without breaking older readers.

Profiles live in ``default_profile_dir()`` (``$TRACEADVISOR_HOME/devices``, else
``~/.cache/traceadvisor/devices``); the one whose device name and SM count match the trace's GPU
is used, the newest when several match. Configuration can name one file instead
(``device-profile = "path"`` in ``[tool.traceadvisor.gpu]``).
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from traceadvisor.atomic import write_bytes
from traceadvisor.trace.device import DTYPES
from traceadvisor.trace.device import PROFILE_SCHEMA as SCHEMA
from traceadvisor.trace.device import DeviceProfile as DeviceProfile  # re-exported: its readers are here


class ProfileError(ValueError):
    """A device profile that cannot be read or is not of the format (one-line message)."""


def default_profile_dir() -> Path:
    """``$TRACEADVISOR_HOME/devices``, else ``~/.cache/traceadvisor/devices``."""
    home = os.environ.get("TRACEADVISOR_HOME")
    if home:
        return Path(home).expanduser() / "devices"
    return Path.home() / ".cache" / "traceadvisor" / "devices"


def profile_filename(name: str, sm_count: int) -> str:
    """The file name ``calibrate`` should use: ``nvidia-h100-80gb-hbm3-132sm.json``."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    return f"{slug}-{int(sm_count)}sm.json"


def parse_device_profile(doc: Any, origin: str = "device profile") -> DeviceProfile:
    """Validate a profile document; a ``ProfileError`` says what is wrong in one line."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{origin}: a device profile is a JSON object")
    if doc.get("schema") != SCHEMA:
        raise ProfileError(f"{origin}: schema must be {SCHEMA!r}, not {doc.get('schema')!r}")
    device = _table(doc, "device", origin)
    measured = _table(doc, "measured", origin)
    name = device.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ProfileError(f"{origin}: device.name must be a non-empty string")
    sm_count = _positive_int(device.get("sm_count"), "device.sm_count", origin)
    cc = device.get("compute_capability", "")
    if not isinstance(cc, str) or (cc and not re.fullmatch(r"\d+\.\d+", cc)):
        raise ProfileError(f"{origin}: device.compute_capability must be a string like '9.0'")
    mem = device.get("total_memory_bytes", 0)
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 0):
        raise ProfileError(f"{origin}: device.total_memory_bytes must be a non-negative integer")
    bandwidth = _positive_number(measured.get("memory_bandwidth_gbs"), "measured.memory_bandwidth_gbs", origin)
    raw_flops = measured.get("flops", {})
    if not isinstance(raw_flops, dict):
        raise ProfileError(f"{origin}: measured.flops must be an object of dtype: FLOP/s")
    flops: dict[str, float | None] = {}
    extra: dict[str, float | None] = {}
    for key, value in raw_flops.items():
        number = None if value is None else _positive_number(value, f"measured.flops.{key}", origin)
        (flops if key in DTYPES else extra)[str(key)] = number
    method = doc.get("method", {})
    if not isinstance(method, dict):
        raise ProfileError(f"{origin}: method must be an object")
    torch_version = doc.get("torch", "")
    created = doc.get("created", "")
    if not isinstance(torch_version, str) or not isinstance(created, str):
        raise ProfileError(f"{origin}: torch and created must be strings")
    if created:
        try:
            datetime.fromisoformat(created)
        except ValueError:
            raise ProfileError(f"{origin}: created must be an ISO 8601 time, not {created!r}") from None
    return DeviceProfile(
        name=name.strip(),
        sm_count=sm_count,
        compute_capability=cc,
        total_memory_bytes=int(mem or 0),
        memory_bandwidth_gbs=bandwidth,
        flops=flops,
        method=method,
        torch=torch_version,
        created=created,
        extra_flops=extra,
        path=None if origin == "device profile" else origin,
    )


def load_device_profile(path: str | Path) -> DeviceProfile:
    """Read and validate a profile file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{p}: device profile not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{p}: cannot read device profile ({exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{p}: device profile is not JSON ({exc.msg}, line {exc.lineno})") from None
    return parse_device_profile(doc, str(p))


def save_device_profile(profile: DeviceProfile, path: str | Path) -> Path:
    """Validate and write a profile atomically (temporary file + rename); creates the folder."""
    doc = profile.to_dict()
    parse_device_profile(doc, str(path))  # never write a file that would not load
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(p, (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode())
    return p


def find_device_profile(name: str, sm_count: int, directory: Path | None = None) -> DeviceProfile | None:
    """The newest valid profile in ``directory`` (default dir) for this device name and SM count.

    Files that do not parse are skipped: one broken file must not hide the others.
    """
    folder = default_profile_dir() if directory is None else directory
    if not folder.is_dir():
        return None
    best: DeviceProfile | None = None
    for f in sorted(folder.glob("*.json")):
        try:
            prof = load_device_profile(f)
        except ProfileError:
            continue
        if prof.name != name.strip() or prof.sm_count != int(sm_count):
            continue
        if best is None or _created(prof) >= _created(best):
            best = prof
    return best


def _created(p: DeviceProfile) -> float:
    try:
        return datetime.fromisoformat(p.created).timestamp() if p.created else 0.0
    except ValueError:
        return 0.0


def _table(doc: dict[str, Any], key: str, origin: str) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise ProfileError(f"{origin}: {key} must be an object")
    return value


def _positive_number(value: Any, what: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ProfileError(f"{origin}: {what} must be a positive number, not {value!r}")
    return float(value)


def _positive_int(value: Any, what: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProfileError(f"{origin}: {what} must be a positive integer, not {value!r}")
    return value
