"""The command line as a test drives it: in a fresh interpreter or in this process."""

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def forced_devices_flags(devices: int) -> str:
    """XLA_FLAGS of a test process with `devices` forced CPU devices."""
    return f"--xla_force_host_platform_device_count={devices}"


def subprocess_env(devices: int | None = None, **extra: str) -> dict[str, str]:
    """This process's environment for a child Python: the repository root on its path (so it
    can import `tests.helpers`) and, with `devices`, that many forced CPU devices."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if devices is not None:
        env["XLA_FLAGS"] = forced_devices_flags(devices)
    return env


def script_json(script: str, *args: str, devices: int, timeout: float = 300) -> dict:
    """Run `script` (Python source) in a fresh interpreter with `devices` forced CPU
    devices and `args` as its argv; the JSON object its last line of stdout prints."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=subprocess_env(devices=devices),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run the real `python -m jaxrl_async` in a subprocess; returns CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "jaxrl_async", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_cli_in_process(*args, cwd):
    """`jaxrl_async.cli.main(args)` in this process, in `cwd`: (exit code, stderr). The same
    code as the command without a fresh interpreter; the signal handlers and working
    directory it changes are put back."""
    code, _, err = run_cli_with_output(*args, cwd=cwd)
    return code, err


def run_cli_with_output(*args, cwd):
    """`run_cli_in_process`, keeping what the command printed: (exit code, stdout, stderr)."""
    from jaxrl_async import cli

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    before, out, err = os.getcwd(), io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = cli.main(list(args))
            except SystemExit as e:  # argparse's own errors
                code = e.code
    finally:
        os.chdir(before)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return code, out.getvalue(), err.getvalue()
