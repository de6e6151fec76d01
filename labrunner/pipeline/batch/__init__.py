"""A batch: many submissions graded as one command, on this machine (`local_executor`) or on a Slurm
cluster (`slurm`), each in a process of its own (`submission`), with the course's reports."""
