"""The build: a student's file turned into a module the lab can run, or one clear compile error.

Reading the file, the include policy, NVRTC with the shared prelude (always in a child process
under a clock and a memory ceiling, its messages cut to the student's own lines), the entry
points and their parameter types, and the launch constants the file exports;
`gate.load_submission` runs those steps in that order. It may use the lab definitions
(`labrunner.labs`) and the truth, never the stages that run or time kernels.
"""
