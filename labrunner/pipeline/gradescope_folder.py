"""Gradescope's submission folder: the one kernel file a student uploaded, graded, or the reason there is
none, in results.json; and no results.json at all where the grader itself failed.

Gradescope runs the course's `run_autograder` once per submission, with what the student uploaded in
/autograder/submission/, and shows the student /autograder/results/results.json. Where the autograder
leaves no results.json (and exits non-zero), Gradescope says the autograder failed and shows staff what
it printed. So `attnlab grade LAB FOLDER --gradescope PATH` decides between two outcomes:

- the student's: exactly one kernel file (a `.cu` file, or a `.py` file in a lab that takes Triton) is
  graded and its grade published, whatever it is (a compile error, a hang, a crash are verdicts like
  any other). Two files, none, an empty file, or a file that cannot be read as a submission (a link, a
  FIFO, more than 1 MiB, not UTF-8) is the student's to fix: results.json with score 0 and what to do,
  exit 2 (the verdict `usage-error`, as the same file graded alone gets);
- the grader's: a grade that ended in a usage error once the file was read (the course's lab, seed,
  options or points table), in a missing environment (no box, no compiler, no GPU where the course
  asked for one), or that was interrupted, publishes nothing. A results.json left from an earlier run
  is removed first, so none is ever stale, and the reason goes to stderr for staff. A grade never turns
  a student's bytes into a fault of the grader: the stages below report those as verdicts.

The folder is the student's upload, so it is walked as hostile: links are never followed (a link named
`flash.cu` is a candidate, and reading it refuses it), hidden entries (`.git`, macOS's `._flash.cu`)
and `__MACOSX` are skipped, and at most `MAX_ENTRIES` entries, `MAX_DEPTH` folders deep, are looked at.
Names are shown escaped (`shown_path`), relative to the folder, as the student named them.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from labrunner.compile.source import read_source, take_notes
from labrunner.exit_codes import AttnlabError, ExitCode, usage_error
from labrunner.labs import get_lab
from labrunner.labs.definition import Lab
from labrunner.report.gradescope import gradescope_results
from labrunner.report.reporter import Reporter
from labrunner.report.results import ResultJson, RunResult
from labrunner.run.untrusted_text import shown_path

# More than a student uploads by hand, and few enough to list at once (a repository with its history
# unpacked is skipped with its .git folder).
MAX_ENTRIES = 10_000
MAX_DEPTH = 16
# Names listed in a message before "and N more".
NAMES_SHOWN = 5
# Exit codes that say the grade is not the student's to keep: the course's own command or files, the
# machine, or a grade stopped before it finished.
GRADER_FAULTS = frozenset({ExitCode.USAGE, ExitCode.ENVIRONMENT, ExitCode.INTERRUPTED, ExitCode.TERMINATED})
_SKIPPED_FOLDERS = ("__MACOSX",)


@dataclass
class GradescopeFolder:
    """One Gradescope submission: `lab` graded from the kernel file in `folder`, results to `results_path`."""

    lab: str
    folder: Path
    results_path: Path
    refused: str | None = field(default=None, init=False)  # why the upload is not graded: the student's to fix

    def withdraw_stale(self) -> None:
        """Remove a results.json an earlier run left, so a run that publishes nothing leaves nothing."""
        with contextlib.suppress(OSError):  # a folder, or no permission: the check of every output path names it next
            self.results_path.unlink(missing_ok=True)

    def submission(self) -> Path:
        """The one file to grade, or an AttnlabError: the student's (recorded in `refused`) or the grader's."""
        lab = get_lab(self.lab)  # an unknown lab is the course's mistake: raised as it is
        candidates, others = self._listing(lab)
        if len(candidates) != 1:
            self.refused = several_files(lab, candidates) if candidates else no_file(lab, others)
            raise usage_error(self.refused)
        path = self.folder / candidates[0]
        label = shown_path(candidates[0])
        try:
            source = read_source(path, label)
        except AttnlabError as exc:
            self.refused = f"{exc.message}. Upload the corrected file and submit again"
            raise usage_error(self.refused) from None
        finally:
            take_notes()  # the grade reads the file again and says what it notes once
        if not source.strip():
            self.refused = (
                f"{label} is empty: upload the file that holds your kernels and submit again (`attnlab starter "
                f"{lab.name}` prints the file to start from)"
            )
            raise usage_error(self.refused)
        return path

    def publish(self, result: RunResult, reporter: Reporter) -> None:
        """results.json for the student's outcome; for a fault of the grader, nothing, and the reason on stderr."""
        if self.refused is None and result.exit_code in GRADER_FAULTS:
            reporter.error(
                f"no results.json written: the grade ended {result.verdict} (exit {int(result.exit_code)}), a fault "
                "of the grader, not of the submission. Fix the autograder (its lab, seed, options, or what setup.sh "
                "installs) and regrade: until then Gradescope shows the autograder as failed, never a score"
            )
            return
        write_results(result.to_json(), self.results_path)

    def _listing(self, lab: Lab) -> tuple[list[str], list[str]]:
        """The folder's candidate files and its other entries, as paths relative to it, sorted."""
        suffixes = (".cu", ".py") if lab.triton_blocks else (".cu",)
        candidates: list[str] = []
        others: list[str] = []
        seen = 0
        pending: list[tuple[Path, PurePosixPath]] = [(self.folder, PurePosixPath())]
        while pending:
            folder, relative = pending.pop()
            for entry in listed(folder, relative):
                seen += 1
                if seen > MAX_ENTRIES:
                    self.refused = (
                        f"the submission holds more than {MAX_ENTRIES} files and folders: upload your kernel file "
                        "alone and submit again"
                    )
                    raise usage_error(self.refused)
                name = relative / entry.name
                if entry.name.startswith(".") or entry.name in _SKIPPED_FOLDERS:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if len(name.parts) < MAX_DEPTH:
                        pending.append((folder / entry.name, name))
                elif PurePosixPath(entry.name).suffix in suffixes:
                    candidates.append(str(name))
                else:
                    others.append(str(name))
        return sorted(candidates), sorted(others)


def listed(folder: Path, relative: PurePosixPath) -> list[os.DirEntry[str]]:
    """A folder's entries. The submission folder itself not listable is the grader's; a folder inside it
    the student's upload made unreadable is left out, like any entry that is not a kernel file."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as exc:
        if relative.parts:
            return []
        raise usage_error(f"{shown_path(folder)}: cannot list the submission folder ({exc.strerror})") from None


def several_files(lab: Lab, candidates: list[str]) -> str:
    kind = "kernel file (.cu, or a Triton .py)" if lab.triton_blocks else "kernel file (.cu)"
    return (
        f"{len(candidates)} kernel files were submitted ({names(candidates)}): attnlab grades exactly one "
        f"{kind}; keep the one you mean to hand in, upload that file alone and submit again"
    )


def no_file(lab: Lab, others: list[str]) -> str:
    kind = "one .cu file or one Triton .py file" if lab.triton_blocks else "one .cu file"
    held = f"the submission holds {names(others)}" if others else "the submission is empty"
    why = [f"no kernel file was submitted: {lab.name} grades {kind}, and {held}"]
    if not lab.triton_blocks and any(PurePosixPath(o).suffix == ".py" for o in others):
        why.append(f"{lab.name} takes no Triton file")
    misnamed = [o for o in others if PurePosixPath(o).suffix.lower() == ".cu"]
    if misnamed:
        why.append(f"rename {shown_path(misnamed[0])} to end in .cu")
    return "; ".join(why) + ". Upload your kernel file and submit again"


def names(paths: list[str]) -> str:
    shown = [shown_path(p) for p in paths[:NAMES_SHOWN]]
    more = len(paths) - NAMES_SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def write_results(data: ResultJson, path: Path) -> None:
    """Gradescope's results.json for one grade's JSON result, written whole or not at all: a run stopped
    mid-write leaves no half file for Gradescope to read."""
    text = json.dumps(gradescope_results(data), indent=2, allow_nan=False) + "\n"
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
