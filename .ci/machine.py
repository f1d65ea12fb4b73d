"""Print what a CI run ran on: CPU, cores, BLAS kernels and thread settings (issue 29).

A float result can depend on these, so a failing run names the machine it failed on.
Run with the project's venv (numpy, torch, threadpoolctl, OpenCV installed).
"""

import os
import platform

import cv2
import numpy
import threadpoolctl
import torch


def cpu_model() -> str:
    """The model name the kernel reports (platform.processor() is often empty on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    lines = [f"cpu: {cpu_model()}, {os.cpu_count()} cores visible, {len(os.sched_getaffinity(0))} usable",
             f"torch {torch.__version__}: BLAS {'MKL' if torch.backends.mkl.is_available() else 'other'}, "
             f"kernel {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} intra-op / "
             f"{torch.get_num_interop_threads()} inter-op threads"]
    for pool in threadpoolctl.threadpool_info():
        kernel = f", kernel {pool['architecture']}" if pool.get("architecture") else ""
        lines.append(f"{pool['internal_api']} {pool.get('version') or ''} ({os.path.basename(pool['filepath'])}): "
                     f"{pool['num_threads']} threads{kernel}")
    lines.append(f"numpy {numpy.__version__}, OpenCV {cv2.__version__}: {cv2.getNumThreads()} threads")
    settings = {name: os.environ[name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                    "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR") if name in os.environ}
    lines.append(f"thread settings: {settings or 'none set (library defaults)'}")
    print("\n".join(f"machine: {line}" for line in lines), flush=True)


if __name__ == "__main__":
    main()
