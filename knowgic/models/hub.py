"""The Hugging Face hub as a model source: whether a hub id's files are cached here, whether the network
is off, and one question to the hub (no retries) that tells a missing model from a missing network.

    hub id ──in the local cache (config.json)?  yes: loadable offline
           ──network off (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1)?  refused at once, saying so
           ──HfApi.model_info (one request, HUB_TIMEOUT_SECONDS): no such model / no network / fine
"""

from __future__ import annotations

import os
from pathlib import Path

from knowgic.models import registry

HUB_TIMEOUT_SECONDS = 10.0
"""How long the one question to the hub may take before the network counts as missing."""
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""The environment variables that turn the network off for model files."""
CONFIG_FILE = "config.json"
"""The file whose presence in the cache counts as the model being cached (transformers reads it first)."""


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def network_off() -> str | None:
    """The variable that turns the hub off (``HF_HUB_OFFLINE=1``), or None when the hub may be asked."""
    from huggingface_hub import constants

    for variable in OFFLINE_VARIABLES:
        if _true(os.environ.get(variable)):
            return f"{variable}=1"
    return "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else None


def cached_hub_file(name: str, filename: str = CONFIG_FILE, revision: str | None = None) -> Path | None:
    """``filename`` of hub model ``name`` in the local Hugging Face cache, or None (nothing is fetched)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, filename, revision=revision)
    except (ValueError, OSError):  # a name the cache cannot hold, an unreadable cache
        return None
    return Path(found) if isinstance(found, str) else None


NETWORK_ERRORS = ("TransportError", "ConnectionError", "ConnectError", "Timeout", "TimeoutException")
"""Names of the exception classes that mean no answer came (httpx and its forks, requests): matched by name
along the class's bases, whichever HTTP client this huggingface_hub uses."""


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the hub gave no answer at all (no route, no name, refused, timed out)."""
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    return any(cls.__name__ in NETWORK_ERRORS for cls in type(exc).__mro__)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def hub_problem(name: str, revision: str | None = None, ask_hub: bool = True) -> str | None:
    """Why hub model ``name`` cannot be loaded here, or None: it is cached, or the hub has it, or the hub
    answered in a way only loading can explain. ``ask_hub``: put one question to the hub (no retries) when
    the model is not cached and the network is on."""
    if cached_hub_file(name, revision=revision) is not None:
        return None
    where = f"model {name!r} is not in the local Hugging Face cache"
    off = network_off()
    if off is not None:
        return (
            f"{where} and the network is off ({off}): download it once with the network on, or give a local "
            f"folder; offline names: {', '.join(registry.offline_names())}"
        )
    if not ask_hub:
        return None
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        HfApi().model_info(name, revision=revision, timeout=HUB_TIMEOUT_SECONDS)
    except RevisionNotFoundError:
        return f"model {name!r} has no revision {revision!r} on the Hugging Face hub"
    except RepositoryNotFoundError:
        return (
            f"no model {name!r} on the Hugging Face hub (or it is private: log in with `hf auth login`); "
            f"offline names: {', '.join(registry.offline_names())}"
        )
    except HfHubHTTPError:  # another answer of the hub (a server error, a rate limit): loading says what
        return None
    except Exception as exc:  # no answer: the HTTP client's own error types
        if not _unreachable(exc):
            return None
        return (
            f"{where} and the Hugging Face hub ({constants.ENDPOINT}) cannot be reached: the network is "
            f"missing ({_first_line(exc)}); connect, or set HF_HUB_OFFLINE=1 and give a cached or local model"
        )
    return None
