"""JUnit XML: how CI systems (GitLab, Jenkins, GitHub's test reporters) show a grading run.

One `<testsuite>` per submission and one `<testcase>` per grading case, written from the result's
JSON form, so a batch builds its aggregated report from the very files it wrote per submission.
What viewers rely on, and so what is written:

- `tests` counts the test cases written; `failures`, `errors`, `skipped` and `time` are all there.
- A failure (the submission failed a check: a wrong case, a misbehaving kernel, a compile error,
  a missed speed gate) carries its text twice: the first line as the `message` attribute (what
  Jenkins and GitHub show) and the whole text in the body (what GitLab shows). Where the grade gave
  hints, each failure carries them too: the first after the message's line
  (`...; hint (rescale): ...`), and every one on a line of its own at the end of the body, as the
  terminal prints them, since a hint says why where the failure says only what.
- An error is a run that could not grade at all (no GPU, a usage error, a grader that died): the
  fault is the grading job's, not the student's.
- The classname is `attnlab.<lab>.<file stem>`, with the stem's dots replaced, because viewers
  split a classname at its dots into packages.
- Every text, the file's name included, is `shown` (untrusted_text.py) on its way in: what that
  writes is always valid XML 1.0, so a compiler's message that quotes a control character, or a
  file name that is not UTF-8, still makes a file every CI can parse.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.etree import ElementTree

from labrunner.report.results import ResultJson, RunResult
from labrunner.run.untrusted_text import shown, shown_text
from labrunner.truth.verdict import NOT_RUN, Status

# <error>, not <failure>: the grader could not grade, which says nothing against the submission
GRADER_FAULTS = (Status.ENVIRONMENT_MISSING, Status.USAGE_ERROR, Status.ERROR, Status.INTERRUPTED)


def xml_text(text: str | None) -> str:
    """Text for an attribute or a body: `shown_text` leaves nothing XML 1.0 forbids (it keeps only tab
    and newline of the C0 controls)."""
    return shown_text(text or "")


def classname(lab: str | None, file: str | None, command: str) -> str:
    stem = Path(shown(file)).stem if file else command
    return f"attnlab.{lab or command}.{re.sub(r'[.]', '_', stem) or command}"


def testsuite(data: ResultJson) -> ElementTree.Element:
    """One submission's suite, from its JSON result."""
    name = f"attnlab {data.get('lab') or data.get('command')} {shown(data.get('file') or '')}".strip()
    suite = ElementTree.Element("testsuite", name=xml_text(name))
    facts = suite_properties(data)
    if facts:
        properties = ElementTree.SubElement(suite, "properties")
        for fact, text in facts:
            ElementTree.SubElement(properties, "property", name=fact, value=xml_text(text))
    owner = xml_text(classname(data.get("lab"), data.get("file"), data.get("command") or "run"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(name: str) -> ElementTree.Element:
        counts["tests"] += 1
        return ElementTree.SubElement(suite, "testcase", classname=owner, name=xml_text(name))

    hints = [h for h in data.get("hints") or [] if isinstance(h, dict) and h.get("text")]
    hint_lines = [f"hint ({h.get('hazard') or 'hint'}): {' '.join(h['text'].split())}" for h in hints]

    def outcome(element: ElementTree.Element, kind: str, status: str, text: str) -> None:
        counts["failures" if kind == "failure" else "errors"] += 1
        first_line = xml_text(text).split("\n", 1)[0]
        if kind == "failure" and hint_lines:  # the grader's faults (errors) have no hint to carry
            first_line = xml_text(f"{first_line}; {hint_lines[0]}")
            text = "\n\n".join([text, "\n".join(hint_lines)])
        tag = ElementTree.SubElement(element, kind, type=status, message=first_line)
        tag.text = xml_text(text)

    for item in data.get("cases") or []:
        element = case(item["name"])
        if item["status"] in NOT_RUN:
            counts["skipped"] += 1
            ElementTree.SubElement(element, "skipped", message=xml_text(item["message"]))
        elif item["status"] != Status.PASS:
            body = item["message"] + (f"\n\ncompute-sanitizer:\n{item['diagnosis']}" if item.get("diagnosis") else "")
            outcome(element, "failure", item["status"], body)
    if data.get("error"):
        verdict = data.get("verdict") or Status.ERROR
        element = case("compile" if verdict == Status.COMPILE_ERROR else verdict)
        outcome(element, "error" if verdict in GRADER_FAULTS else "failure", verdict, data["error"])
    gate = data.get("gate") or {}
    if gate.get("status") in ("met", "missed"):
        element = case("speed-gate")
        if not gate.get("passed", True):
            outcome(element, "failure", Status.SPEED_GATE, gate["message"])
    if data.get("kernel_output"):  # already escaped in the JSON: shown, never interpreted
        ElementTree.SubElement(suite, "system-out").text = xml_text("\n".join(data["kernel_output"]))
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{data.get('seconds') or 0:.3f}")
    return suite


def suite_properties(data: ResultJson) -> list[tuple[str, str]]:
    """The suite's properties: which backend's verdict this is (a CPU verdict is not the GPU's), and where a
    batch graded it for a course, whose it is, what it is worth (report/points.py) and whom it is like."""
    facts = [("backend", str(data["backend"]))] if data.get("backend") else []
    if data.get("student") is not None:
        facts.append(("student", str(data["student"])))
    if data.get("student_id"):
        facts.append(("student_id", str(data["student_id"])))
    points = data.get("points") or {}
    if points:
        score = points.get("score")
        facts.append(("score", "" if score is None else f"{score:g}"))
        facts.append(("max_score", f"{points.get('max_score', 0):g}"))
        if points.get("unscored"):
            facts.append(("unscored", str(points["unscored"])))
    similar = data.get("similar_to") or []
    if similar:
        facts.append(("similar_to", "; ".join(f"{s['student']} ({s['share']:.2f})" for s in similar)))
    return facts


def write_suite(data: ResultJson, path: Path) -> None:
    """One submission's report from its JSON result: what a batch writes again once it has added the course's
    fields (student, points, similar submissions) to a result its grading process wrote."""
    _write(testsuite(data), path)


def write_junit(result: RunResult, path: Path) -> None:
    """One run's report: a `<testsuite>` as the document's root, as it always was."""
    _write(testsuite(result.to_json()), path)


def write_aggregate(results: list[ResultJson], path: Path, name: str) -> None:
    """A batch's report: every submission's suite under one `<testsuites>`, with the totals."""
    root = ElementTree.Element("testsuites", name=xml_text(name))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for data in results:
        suite = testsuite(data)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.attrib[key])
        seconds += float(suite.attrib["time"])
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{seconds:.3f}")
    _write(root, path)


def _write(root: ElementTree.Element, path: Path) -> None:
    ElementTree.indent(root)
    ElementTree.ElementTree(root).write(path, encoding="unicode", xml_declaration=True)
