"""CPU backend: compile a CUDA kernel file with g++ and run it on cooperative fibers (`module.py`).

Nothing is imported here: the driver reaches this package for its light parts (`device_memory`), and
the build's modules cost every grade's start where they are imported before they are needed.
"""
