"""Run inside a sandbox by tests/test_sandbox.py: prints what the boxed process sees, as JSON."""

import json
import os
import resource

from labrunner.run import sandbox

status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({
    "environment": sorted(os.environ),
    "seed": os.environ.get("ATTNLAB_SEED"),
    "cupy_cache": os.environ.get("CUPY_CACHE_DIR"),
    "cwd": os.getcwd(),
    "cwd_entries": sorted(os.listdir(".")),
    "session_leader": os.getsid(0) == os.getpid(),
    "limits": {name: resource.getrlimit(getattr(resource, name))[0]
               for name in ("RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE")},
    "capabilities": int(status["CapEff"].strip(), 16),
    "landlock": sandbox.LANDLOCK_ABI,
    "pid_namespace": sandbox.PID_NAMESPACE,
    "pid": os.getpid(),
}))
