"""Errors caused by what the user asked for: the CLI prints them on one line and exits 2."""

import contextlib
from pathlib import Path


class UserError(Exception):
    """Bad input: a config, an override, an env or a run directory we cannot use."""


class ConfigError(UserError, ValueError):
    """A config that cannot be loaded or does not validate."""


class EnvSpecError(UserError, ValueError):
    """An environment whose outputs disagree with its declared spaces or API."""


class EnvOutputError(EnvSpecError):
    """A host env's reset or step that returned what its spaces do not declare (an
    observation of another shape, a reward that is not one number per env): `what` says
    what it returned and what it declares, `env` names it (an actor's line adds the actor)."""

    def __init__(self, env: str, what: str):
        super().__init__(f"env {env} {what}")
        self.env, self.what = env, what


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (the CLI prints one line)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


@contextlib.contextmanager
def building_env(name: str, kwargs=None):
    """Turn what building env `name` raises into one line: a TypeError is `kwargs` the env
    rejects (ConfigError); anything else (a download offline, a missing file, the env's
    own failures) an env that cannot be built (UserError). Our own errors pass as they are."""
    try:
        yield
    except UserError:
        raise
    except TypeError as e:
        raise ConfigError(
            f"env.kwargs {dict(kwargs or {})!r} rejected by {name}: {first_line(e)}"
        ) from None
    except Exception as e:  # noqa: BLE001  (an env's constructor may raise anything)
        hint = (
            " (it downloads or reads data when built: offline?)" if isinstance(e, OSError) else ""
        )
        raise UserError(
            f"cannot build env {name}{hint}: {type(e).__name__}: {first_line(e)}"
        ) from None


def require(ok: bool, key: str, value, requirement: str) -> None:
    """Raise a one-line ConfigError naming `key` unless `ok`."""
    if not ok:
        raise ConfigError(f"{key} must be {requirement}, got {value!r}")


class RunFailure(RuntimeError):
    """A run that failed while training, not from its input (an env that raised inside an
    actor thread): the CLI prints it on one line and exits 1; checkpoints already written
    stay, and `run_dir` (None: none) can be resumed from the latest."""

    run_dir: Path | None = None


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training between two host calls.

    `run_dir` holds a checkpoint of that point (None when the run wrote no directory);
    `resume` names the call that continues it (a sweep's: jaxrl_async.resume_sweep).
    """

    def __init__(self, env_steps: int, run_dir=None, resume: str = "jaxrl_async.resume"):
        self.env_steps, self.run_dir = env_steps, run_dir
        where = (
            f"checkpoint saved; resume with {resume}({str(run_dir)!r})"
            if run_dir is not None
            else "no run directory: nothing saved"
        )
        super().__init__(f"interrupted at {env_steps:,} env steps ({where})")


class TrainingDiverged(RuntimeError):
    """A non-finite loss, gradient norm or parameter under train.nan_policy=stop: the CLI
    prints it on one line and exits 3 (DIVERGED_EXIT). No checkpoint of the non-finite
    state was written; `checkpoint` names the last one (None: none)."""

    checkpoint: Path | None = None

    def __str__(self) -> str:
        kept = (
            f"; the last finite checkpoint is {self.checkpoint}"
            if self.checkpoint is not None
            else "; no checkpoint was written"
        )
        return f"training diverged: {super().__str__()}{kept}"


DIVERGED_EXIT = 3
