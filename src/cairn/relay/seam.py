"""Former home of the relay's wiring; it is now :mod:`cairn.relay.service` (a job resource of
the trial engine). These names stay importable from here for code written against it."""

from __future__ import annotations

from cairn.relay.service import JobRelayOptions, RelayWanted
from cairn.relay.service import RelayService as RelaySeam

__all__ = ["JobRelayOptions", "RelaySeam", "RelayWanted"]
