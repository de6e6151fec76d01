"""ptxas over the PTX of a Triton file's kernels, in a box of its own: PTX in, cubins out, as data.

Triton's compiler lowers a file's kernels to PTX in a process sealed against starting programs
(`triton_child.py`), so the assembler, which is one, runs here: `triton_build` starts this file in a
compile box (`python -I -S`: nothing of site-packages is imported) with the path of Triton's own
ptxas, and it runs ptxas on each kernel's PTX in the box's private folder, with the options Triton's
own compile passes (`-lineinfo -v --gpu-name=ARCH`, and `--fmad=false` where the kernel asked for no
fused multiply-adds). The PTX came from a process whose compile read the student's code, so it is
text for a compiler, as a `.cu` file is for NVRTC: ptxas reads it under the box's limits.

    argv:   PTXAS GPU_NAME (sm_90a, say)
    stdin:  {name: {"ptx": str, "fp_fusion": bool}}
    stdout: {"status": "done", "cubins": {name: hex}} or {"status": "error", "detail": str}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

LOG_LIMIT = 4000  # characters of ptxas's own words on a failure


def main() -> None:
    ptxas, gpu_name = sys.argv[1], sys.argv[2]
    request = json.loads(sys.stdin.buffer.read())
    cubins = {}
    for index, (name, kernel) in enumerate(sorted(request.items())):
        source, target = f"kernel{index}.ptx", f"kernel{index}.cubin"
        with open(source, "w", encoding="utf-8") as handle:
            handle.write(kernel["ptx"])
        fmad = [] if kernel.get("fp_fusion", True) else ["--fmad=false"]
        done = subprocess.run(
            [ptxas, "-lineinfo", *fmad, "-v", f"--gpu-name={gpu_name}", source, "-o", target],
            capture_output=True,
            text=True,
            errors="replace",
        )
        if done.returncode != 0:
            said = (done.stderr or done.stdout)[-LOG_LIMIT:]
            detail = f"{name}: ptxas failed (exit status {done.returncode}) on Triton's PTX: {said}"
            print(json.dumps({"status": "error", "detail": detail}))
            return
        with open(target, "rb") as handle:
            cubins[name] = handle.read().hex()
        os.remove(source)
        os.remove(target)
    print(json.dumps({"status": "done", "cubins": cubins}))


if __name__ == "__main__":
    main()
