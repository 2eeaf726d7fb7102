"""Ray token authentication for the Ray an Orca context starts or joins.

Ray 2.60 turns token authentication on by default: every gRPC call between Ray processes
carries a bearer token, so only holders of the token can submit work to the cluster. Orca
keeps it on. A Ray that a context starts (embedded, or on the Spark executors) gets a fresh
random token of its own; a Ray cluster the user names with ``address=`` uses the token the
user already has (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``).
Processes that must join (Ray nodes on the executors, Spark tasks that put data into Ray)
receive the token from the driver in their environment; it is never written to disk by Orca.

``ray_auth=False`` in ``init_orca_context`` is the explicit opt-out (``RAY_AUTH_MODE=disabled``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"  # noqa: S105 - the name of a variable, not a secret
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"  # noqa: S105 - the name of a variable, not a secret


def new_token() -> str:
    """A fresh random token (256 bits, hex)."""
    return secrets.token_hex(32)


def ambient_token() -> str | None:
    """The token this user's Ray tools would use: ``RAY_AUTH_TOKEN``, the file named by
    ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``; ``None`` when there is none."""
    token = os.environ.get(TOKEN_VAR)
    if token:
        return token.strip()
    path = os.environ.get(TOKEN_PATH_VAR) or str(Path.home() / ".ray" / "auth_token")
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return text or None


def auth_env(token: str | None) -> dict[str, str]:
    """Environment variables that make a Ray process use ``token`` (``None``: auth disabled)."""
    if token is None:
        return {MODE_VAR: "disabled"}
    return {MODE_VAR: "token", TOKEN_VAR: token}


def current_auth_env() -> dict[str, str]:
    """The auth variables this process's Ray uses now, for processes that must join it."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        enabled = is_token_auth_enabled()
    except ImportError:
        enabled = False
    return auth_env(ambient_token()) if enabled and ambient_token() else auth_env(None)


class AuthEnv:
    """Sets the auth variables in this process's environment and restores them on :meth:`restore`.

    Ray reads them at ``ray.init`` (and its C++ core caches the mode and the token), so the
    caches are refreshed whenever the variables change: two contexts one after the other in
    one interpreter each use their own token.
    """

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def apply(self, env: dict[str, str]) -> None:
        """Set ``env`` (from :func:`auth_env`) in ``os.environ``, remembering what was there."""
        if self._saved is None:
            self._saved = {k: os.environ.get(k) for k in (MODE_VAR, TOKEN_VAR)}
        os.environ.pop(TOKEN_VAR, None)
        os.environ.update(env)
        refresh_ray_auth_cache()

    def restore(self) -> None:
        """Put back the variables as they were before :meth:`apply`."""
        if self._saved is None:
            return
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved = None
        refresh_ray_auth_cache()


def refresh_ray_auth_cache() -> None:
    """Make an already imported Ray re-read the auth mode and token from the environment."""
    import sys

    if "ray" not in sys.modules:
        return  # read fresh at import
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # an older Ray without token auth
        pass
