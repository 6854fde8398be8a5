# Type stub of the native decoder (_kineto.c); see native.py for how it is used.
from typing import Any

ABI: int
MAX_DEPTH: int
MAX_EVENT_BYTES: int

class Unsupported(ValueError): ...

class Decoder:
    events: int
    def feed(self, buffer: Any, start: int, end: int, final: bool, /) -> tuple[int, bool]: ...
    def export(self) -> dict[str, Any]: ...
