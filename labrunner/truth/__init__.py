"""The truth: what a correct answer is, and how the driver tells it from a wrong one.

The attention-v1 contract, the float64 oracle, the golden cases that prove the oracle, the case
catalogue with its seeded inputs (a decode batch's in a paged KV cache), the checker and its one
pass rule, the poison and canary patterns that tell "never written" and "out of bounds" from
"wrong", the judge that decides each case once from its evidence, and the verdict's rules (every
status, its severity and its exit code). Nothing here runs a
student's code, compiles, times or prints: it uses only numpy and `labrunner.exit_codes`, so
every stage above can trust it and every test can reach it without a GPU.
"""
