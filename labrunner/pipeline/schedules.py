"""The CPU backend's schedules: the orders a case's threads and blocks run in, by the number the
runtime knows them by (labrunner/run/cpu/README.md, "Schedules": N >= 0 orders threads and blocks
alike, 0 in order, 1 reversed, 2 and up seeded random; -N orders the blocks alone as N does, each
block's threads in order).

A GPU runs a grid's blocks at once, so a block that reads what an earlier block of the same launch
wrote reads it unwritten there. The CPU runs blocks one after another, and in ascending order such a
kernel would pass: every case's first run therefore takes the blocks last first (-1), the order in
which reading an earlier block's result finds it unwritten, as on a GPU.
"""

from __future__ import annotations

# Every case's first run: each block's threads in order, the blocks in reverse order.
FIRST_SCHEDULE = -1

# The schedules --race-check runs each case under besides the first. First the blocks alone in
# ascending order (0: each block's threads in order), so that a difference there is evidence that
# blocks depend on each other's order, not of a race inside a block. Then each block's threads
# reversed, then seeded random priorities: reversal alone misses a warp that runs ahead through a
# reduction before a slower warp has read the value it overwrites; random priorities let some warp
# run ahead at every barrier.
RACE_SCHEDULES: tuple[tuple[int, str], ...] = (
    (0, "blocks in ascending order"),
    (1, "reverse order"),
    (2, "random order (seed 2)"),
    (3, "random order (seed 3)"),
    (4, "random order (seed 4)"),
    (5, "random order (seed 5)"),
)

# The schedules a failing case is rerun under on the CPU without --race-check: a race found unasked
# costs a failing case three more runs, cheap beside the student's hunt for it: the blocks alone in
# ascending order first (a difference there is about blocks only), then threads reversed, then a
# random order (the one that lets a warp run ahead through a reduction and overwrite what a slower
# warp has yet to read).
RERUN_WHEN_FAILING: tuple[tuple[int, str], ...] = RACE_SCHEDULES[:3]
