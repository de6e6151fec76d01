"""Run inside a sandbox by tests/test_sandbox.py: prints what the boxed process sees, as JSON."""

import json
import os
import resource
import socket
from pathlib import Path

from labrunner.run import sandbox

status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)


def reachable(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2):
            return True
    except OSError:
        return False


def writable(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "planted.py"), "x") as handle:
            handle.write("# planted\n")
        return True
    except OSError:
        return False


# The root, /etc and the folder the box made to hold the package (the package's parent): bubblewrap
# makes them on a tmpfs of its own, which must not take files (only /job may, within its size).
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))  # labrunner/run/sandbox.py -> labrunner
OUTSIDE_THE_PRIVATE_FOLDER = ("/", "/etc", os.path.dirname(PACKAGE))

print(
    json.dumps(
        {
            "environment": sorted(os.environ),
            "seed": os.environ.get("ATTNLAB_SEED"),
            "cupy_cache": os.environ.get("CUPY_CACHE_DIR"),
            "cwd": os.getcwd(),
            "cwd_entries": sorted(os.listdir(".")),
            "session_leader": os.getsid(0) == os.getpid(),
            "limits": {
                name: resource.getrlimit(getattr(resource, name))[0]
                for name in ("RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE")
            },
            "capabilities": int(status["CapEff"].strip(), 16),
            "landlock": sandbox.LANDLOCK_ABI,
            "pid_namespace": sandbox.PID_NAMESPACE,
            "pid": os.getpid(),
            "root_entries": sorted(os.listdir("/")),
            "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "tmp_entries": sorted(os.listdir("/tmp")) if os.path.isdir("/tmp") else None,
            "home_exists": os.path.exists("/home"),
            "etc_entries": sorted(os.listdir("/etc")),
            "network": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None,
            "writable_outside": [folder for folder in OUTSIDE_THE_PRIVATE_FOLDER if writable(folder)],
            "loopback_reachable": reachable(("127.0.0.1", int(os.environ.get("PROBE_PORT", "1")))),
        }
    )
)
