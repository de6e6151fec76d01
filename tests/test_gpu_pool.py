"""A local batch over several GPUs, with GPUs that stand in for real ones: which GPU each grading process
gets (`CUDA_VISIBLE_DEVICES`), spread by free memory, `--gpus` checked, and a GPU that fails its health
check taken out of the batch, its submission graded again on another (pipeline/batch/gpu_pool.py)."""

from __future__ import annotations

import threading

import pytest
from click.testing import CliRunner

from labrunner.cli import main
from labrunner.exit_codes import AttnlabError
from labrunner.pipeline.batch import gpu_pool, local_executor
from labrunner.pipeline.batch.gpu_pool import (
    BatchGpu,
    GpuPool,
    chosen_gpus,
    gpu_answers,
    may_have_failed_its_gpu,
)
from labrunner.pipeline.batch.grading import Grading
from labrunner.pipeline.batch.submission import Outcome, SubmissionTask
from labrunner.report.reporter import Reporter
from tests.conftest import gpu_reason


def task(tmp_path, name: str) -> SubmissionTask:
    return SubmissionTask(
        "lab2", name, (), str(tmp_path / f"{name}.json"), str(tmp_path / f"{name}.xml"), None, str(tmp_path)
    )


def result(verdict: str, exit_code: int, **more) -> dict:
    return {"verdict": verdict, "exit_code": exit_code, **more}


class Notes:
    """A listener that keeps the batch's notes."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def note(self, words: str) -> None:
        self.said.append(words)


def test_a_gpu_with_more_memory_free_takes_more_of_the_batch():
    pool = GpuPool([BatchGpu("0", weight=3), BatchGpu("1", weight=1)])
    taken = [pool.take() for _ in range(8)]
    assert [gpu.name for gpu in taken] == ["0", "1", "0", "0", "0", "1", "0", "0"]
    for gpu in taken[:4]:
        pool.give_back(gpu)
    assert [(gpu.name, gpu.running) for gpu in pool.gpus] == [("0", 3), ("1", 1)]


def test_a_gpu_that_fails_its_check_is_taken_out_and_its_submission_graded_on_another(tmp_path):
    ran: list[tuple[str, str]] = []
    lock = threading.Lock()
    both_running = threading.Barrier(2, timeout=60)  # the first two grades run at once: one on each GPU

    def job(given: SubmissionTask, running: object) -> Outcome:
        gpu = dict(given.environment)["CUDA_VISIBLE_DEVICES"]
        with lock:
            ran.append((given.file, gpu))
            first_two = len(ran) <= 2
        if first_two:
            both_running.wait()
        if gpu == "1":  # the GPU is gone: its grading process died under every submission
            return Outcome(given, result("environment-missing", 6, grader_died=True), 0.1)
        return Outcome(given, result("pass", 0), 0.1)

    checked: list[str] = []

    def check(name: str) -> str | None:
        checked.append(name)
        return "it failed a health check (cudaErrorDevicesUnavailable)" if name == "1" else None

    notes = Notes()
    pool = GpuPool([BatchGpu("0"), BatchGpu("1")], check=check)
    tasks = [task(tmp_path, f"s{i}.cu") for i in range(4)]
    outcomes = local_executor.run_local(tasks, 2, pool, Grading(job=job, reporter=Reporter(notes)))
    assert [(o.task.file, o.result["verdict"], o.exit_code) for o in outcomes] == [
        (f"s{i}.cu", "pass", 0) for i in range(4)
    ]
    assert [gpu.out for gpu in pool.gpus] == [None, "it failed a health check (cudaErrorDevicesUnavailable)"]
    assert pool.left() == ["0"]
    # every submission that ran on GPU 1 ran again on GPU 0, and nothing ran on GPU 1 after it was taken out
    on_one = [file for file, gpu in ran if gpu == "1"]
    assert on_one and all((file, "0") in ran[ran.index((file, "1")) :] for file in on_one)
    assert set(checked) == {"1"}
    first = on_one[0]
    assert notes.said[0] == (
        "GPU 1 is out of the batch: it failed a health check (cudaErrorDevicesUnavailable); GPUs left: 0. "
        f"{first} is graded again on another GPU"
    )


def test_a_kernel_that_wrecks_only_its_own_context_keeps_its_verdict_and_the_gpu(tmp_path):
    def job(given: SubmissionTask, running: object) -> Outcome:
        if given.file == "wrecks.cu":
            return Outcome(given, result("crash", 4), 0.1)
        return Outcome(given, result("pass", 0), 0.1)

    checked: list[str] = []
    pool = GpuPool([BatchGpu("0")], check=lambda name: checked.append(name))
    tasks = [task(tmp_path, name) for name in ("wrecks.cu", "fine.cu")]
    outcomes = local_executor.run_local(tasks, 1, pool, Grading(job=job))
    assert [(o.task.file, o.result["verdict"]) for o in outcomes] == [("wrecks.cu", "crash"), ("fine.cu", "pass")]
    assert checked == ["0"]  # asked once, after the crash; it answered
    assert pool.left() == ["0"]


def test_when_every_gpu_failed_what_is_left_is_not_graded_and_says_why(tmp_path):
    def job(given: SubmissionTask, running: object) -> Outcome:
        return Outcome(given, result("timeout", 4), 0.1)

    pool = GpuPool([BatchGpu("0")], check=lambda name: "it did not answer a health check within 60 s")
    outcomes = local_executor.run_local([task(tmp_path, "a.cu"), task(tmp_path, "b.cu")], 1, pool, Grading(job=job))
    assert [(o.result["verdict"], o.exit_code) for o in outcomes] == [("environment-missing", 6)] * 2
    assert outcomes[0].result["error"] == (
        "not graded: every GPU of the batch failed (GPU 0: it did not answer a health check within 60 s)"
    )


@pytest.mark.parametrize(
    "graded, suspect",
    [
        (result("crash", 4), True),
        (result("timeout", 4), True),
        (result("environment-missing", 6), True),
        (result("environment-missing", 6, grader_died=True), True),
        (result("race", 4), False),  # a race needed a working GPU to be seen
        (result("wrong", 1), False),
        (result("pass", 0), False),
        (result("compile-error", 3), False),
    ],
)
def test_only_a_crash_a_hang_or_a_lost_environment_asks_whether_the_gpu_failed(tmp_path, graded, suspect):
    assert may_have_failed_its_gpu(Outcome(task(tmp_path, "a.cu"), graded, 0.0)) is suspect


def test_gpus_are_checked_against_the_visible_ones():
    assert chosen_gpus(None, ["0", "1"]) == ["0", "1"]
    assert chosen_gpus(("1",), ["0", "1"]) == ["1"]
    with pytest.raises(AttnlabError) as unknown:
        chosen_gpus(("0", "2", "5"), ["0", "1"])
    assert unknown.value.message == (
        "--gpus 0,2,5: no GPU 2, 5 here; this machine's GPUs are 0, 1 (as CUDA_VISIBLE_DEVICES or the driver "
        "numbers them)"
    )
    assert unknown.value.exit_code == 2
    with pytest.raises(AttnlabError) as none:
        chosen_gpus(("0",), [])
    assert none.value.message == (
        "--gpus 0: no GPU is visible here (CUDA_VISIBLE_DEVICES, or no driver); leave out --gpus, or grade "
        "with --device cpu"
    )


@pytest.mark.parametrize(
    "given, said",
    [
        ("0,,2", "'0,,2' is not a list of GPUs such as 0,2 (indices or UUIDs, by commas)"),
        ("0;2", "'0;2' is not a list of GPUs such as 0,2 (indices or UUIDs, by commas)"),
        ("1,1", "'1,1' names a GPU twice"),
    ],
)
def test_gpus_takes_a_list_of_names_and_refuses_anything_else(given, said):
    outcome = CliRunner().invoke(main, ["grade", "lab2", "a.cu", "--gpus", given])
    assert outcome.exit_code == 2
    assert f"Invalid value for '--gpus': {said}" in outcome.output


def test_gpus_on_the_cpu_backend_is_a_usage_error(tmp_path):
    outcome = CliRunner().invoke(
        main, ["grade", "lab2", "kernels/lab2/solution.cu", "--gpus", "0", "--device", "cpu", "--csv", "-"]
    )
    assert outcome.exit_code == 2
    assert (
        "--gpus 0: this batch grades on the cpu backend, and --gpus chooses the GPUs of a batch on the GPU; "
        "leave it out, or grade with --device gpu"
    ) in " ".join(outcome.output.split())


@pytest.mark.skipif(gpu_reason() is None, reason="a GPU here answers the check")
def test_the_health_check_of_a_gpu_that_is_not_there_says_why_it_failed():
    said = gpu_answers("0", timeout_s=120)
    assert said is not None and said.startswith("it failed a health check (") and said.endswith(")")


def fake_host(tmp_path, monkeypatch, gpus: dict[int, str]) -> None:
    """A host's /dev nodes and the driver's record for GPUs {minor: uuid}, where box.py looks for them."""
    from labrunner import box

    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    (dev / "dri").mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1"):
        (dev / name).touch()
    records = tmp_path / "proc-gpus"
    for minor, uuid in gpus.items():
        (dev / f"nvidia{minor}").touch()
        (dev / "dri" / f"renderD{128 + minor}").touch()
        record = records / f"0000:{0x19 + minor:02x}:00.0"
        record.mkdir(parents=True)
        (record / "information").write_text(
            f"Model: \t\t NVIDIA H200\nGPU UUID: \t {uuid}\nBus Location: \t 0000:{0x19 + minor:02x}:00.0\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n"
        )
    monkeypatch.setattr(box, "GPU_DEVICE_PATTERNS", (f"{dev}/nvidia*", f"{dev}/nvidia-caps/*", f"{dev}/dri/renderD*"))
    monkeypatch.setattr(box, "NVIDIA_GPUS", records)


UUIDS = {0: "GPU-11111111-2222-3333-4444-555555555555", 2: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}


def test_a_box_given_one_gpu_by_its_uuid_maps_that_gpus_node_alone(tmp_path, monkeypatch):
    from labrunner import box

    fake_host(tmp_path, monkeypatch, UUIDS)
    dev = tmp_path / "dev"
    shared = [f"{dev}/nvidia-caps", f"{dev}/nvidia-caps/nvidia-cap1", f"{dev}/nvidia-uvm", f"{dev}/nvidia-uvm-tools"]
    shared.append(f"{dev}/nvidiactl")
    assert sorted(box.gpu_device_nodes(UUIDS[2].upper())) == sorted([f"{dev}/nvidia2", *shared])
    assert sorted(box.gpu_device_nodes(UUIDS[0])) == sorted([f"{dev}/nvidia0", *shared])
    every = sorted([f"{dev}/nvidia0", f"{dev}/nvidia2", f"{dev}/dri/renderD128", f"{dev}/dri/renderD130", *shared])
    # an index, several GPUs, a UUID the driver does not list, or none: every GPU's nodes, as before
    for visible in ("2", f"{UUIDS[0]},{UUIDS[2]}", "GPU-00000000-0000-0000-0000-000000000000", None):
        assert sorted(box.gpu_device_nodes(visible)) == every, visible
    line = box.wrap(box.GPU_RUN, ["true"], {"CUDA_VISIBLE_DEVICES": UUIDS[2]})
    bound = [line[i + 1] for i, word in enumerate(line) if word == "--dev-bind"]
    assert sorted(bound) == sorted([f"{dev}/nvidia2", *shared])


def test_a_gpus_uuid_is_read_from_the_drivers_record_at_its_bus_id(tmp_path, monkeypatch):
    from labrunner import box

    fake_host(tmp_path, monkeypatch, UUIDS)
    assert box.gpu_uuid_at("0000:1B:00.0") == UUIDS[2]  # CUDA writes the bus id in capitals
    assert box.gpu_uuid_at("0000:19:00.0") == UUIDS[0]
    assert box.gpu_uuid_at("0000:80:00.0") is None


def test_a_gpus_uuid_is_named_as_cuda_visible_devices_takes_it():
    raw = bytes.fromhex("aaaaaaaabbbbccccddddeeeeeeeeeeee")
    assert gpu_pool.uuid_name(raw) == UUIDS[2]
    assert gpu_pool.uuid_name(b"short") is None


def test_several_gpus_are_given_to_their_processes_by_uuid_and_checked_by_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_pool, "free_gpu_bytes", lambda index: [40 << 30, 9 << 30][index])
    monkeypatch.setattr(gpu_pool, "gpu_uuid", lambda index: [UUIDS[0], UUIDS[2]][index])
    gpus = gpu_pool.batch_gpus(["0", "1"], ["0", "1"], measured=True)
    assert [(g.name, g.weight, g.uuid) for g in gpus] == [("0", 5, UUIDS[0]), ("1", 1, UUIDS[2])]
    # one GPU of the host's, chosen alone: measured (--jobs auto) but given by its index, its box as before
    alone = gpu_pool.batch_gpus(["1"], ["0", "1"], measured=True)
    assert [(g.name, g.weight, g.uuid) for g in alone] == [("1", 1, None)]
    given: list[str] = []

    def job(task: SubmissionTask, running: object) -> Outcome:
        given.append(dict(task.environment)["CUDA_VISIBLE_DEVICES"])
        return Outcome(task, result("crash", 4), 0.1)

    checked: list[str] = []
    pool = GpuPool(gpus, check=lambda name: checked.append(name))
    local_executor.run_local([task(tmp_path, "a.cu")], 1, pool, Grading(job=job))
    assert given == [UUIDS[0]] and checked == [UUIDS[0]]
