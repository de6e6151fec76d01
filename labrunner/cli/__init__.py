"""The command line: click's parsing, each option declared once, and the calls into the pipeline."""

from labrunner.cli.blas import one_blas_thread

one_blas_thread()  # before anything imports numpy (cli/blas.py says why)

from labrunner.cli.main import main  # noqa: E402

__all__ = ["main"]
