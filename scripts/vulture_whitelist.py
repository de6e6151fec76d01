"""Names vulture (configured in pyproject.toml's [tool.vulture]) cannot see used: each is used by name,
from outside Python's own references, or by the tests alone, and each says which. Anything vulture reports
that is not listed here is dead code, to be removed rather than listed. vulture reads this file; nothing
imports it."""


class _Used:
    """`_.name` marks `name` as used (vulture's own whitelists do the same)."""

    def __getattr__(self, name: str) -> "_Used":
        return self


_ = _Used()

# click: commands registered by their decorators, and the methods click calls on its subclasses.
_.doctor  # cli/main.py: `attnlab doctor`
_.bench  # cli/main.py: `attnlab bench`
_.calibrate  # cli/main.py: `attnlab calibrate`
_.format_options  # cli/help_groups.py: click.Command's help, overridden
_.convert  # cli/options.py: click.ParamType's conversion, overridden

# Fields read by name: dataclass fields written to JSON (asdict, to_json) and TypedDict keys read as strings.
_.cuda_runtime  # measure/device_state.py, records/device.py: a device's JSON
_.cupy_version
_.temperature_c
_.driver_release
_.q_bytes  # records/traffic.py: Traffic's JSON (json_layout names them; naive_over_flash is derived there)
_.kv_bytes
_.out_bytes
_.naive_over_flash
_.timing_from_json  # records/timing.py: a result file's timing by its kind; tests/test_serialize.py reads with it
_.max_sm_clock_mhz  # records/roofline.py: GpuFacts, the roofline's JSON
_.max_memory_clock_mhz
_.memory_bus_width_bits
_.measured_copy_bytes_per_s
_.account  # pipeline/batch/settings.py: read by name (slurm.py's getattr over the sbatch options)
_.mem
_.cpus_per_task
_.qos
_.entsize  # run/cpu/object_check.py: a section header's field, unpacked in the ELF's order
_.last_key  # truth/hints_records.py: Evidence keys, read as evidence["..."] by the hints
_.nan_only_matches
_.kv_heads_read
_.k_heads_read
_.v_heads_read
_.rescale_missing
_.empty_partition_rows
_.partial_page_rows
_.nonfinite_rows
_.padding_rows
_.past_table_rows
_.factor_text
_.row_factors
_.stage_kernels
_.stage_matches
_.scores_kv_heads_read
_.wsum_kv_heads_read
_.stages_compared

# Attributes other libraries read or define: set here for them, or a protocol of theirs implemented.
_.returns  # compile/triton_package.py: an ast.FunctionDef's annotation, cleared before compiling
_.allow_tf32  # measure/peers.py: PyTorch's switch, set off
_._width  # report/terminal.py: rich's Console width, reset
_.__array_interface__  # run/cpu/device_memory.py: numpy's protocol for foreign memory
_.clone  # run/cpu/triton_lockstep.py: the Triton interpreter's tensor and reduction hooks, overridden
_.min_max
_.generic_reduce
_.apply_impl
_.__class__
_.allow_reorder  # triton_lockstep.py: a parameter of Triton's reshape, which the hook must accept
_.data_ptr  # run/cpu/triton_module.py: the torch.Tensor methods Triton's interpreter calls on a host tensor
_.copy_
_.untyped_storage
_.storage_offset
_.new_empty
_.set_
_.cpu_options  # run/gpu_device.py: the CPU backend's compile options, accepted and unused on the GPU

# Called by name from outside Python: the box's bootstrap runs it from its command line.
_.enter  # run/sandbox.py

# Unpacked beside the value that is used: getrlimit's (soft, hard).
_.soft  # compile/nvrtc_child.py, triton_child.py, triton_import_child.py

# Used by the tests alone: helpers and figures the tests call or read, kept as the package's own.
_.compile_gate  # compile/gate.py
_.lesson_roofline  # measure/roofline.py
_.mean_ms  # measure/sampling.py
_.CpuReferences  # pipeline/timing_stage.py: the CPU's references for the tests' stand-in GPU
_.STATUS_EXIT_CODES  # report/results.py
_.DEFAULT_THRESHOLD  # report/similarity.py
_.read_int_global  # run/cpu/module.py
_.grouped  # run/cpu/triton_lockstep.py: LockstepStats, read by the tests
_.write_case  # run/diagnose.py: a replay's files written by hand
_.total_elements  # truth/checker.py
_.kv_head_of  # truth/contract.py
_.poisoned  # truth/poison.py

# records/: fields and derived figures the one serializer (records/serialize.py) writes by name, from each
# record's fields and json_layout; comparison_from_json stays for the tests that read a comparison back.
_.achieved_bytes_per_s
_.against_prefill
_.attainable_flops_per_s
_.baseline_median_ms
_.baseline_per_input_set_ms
_.calibration
_.call_totals
_.comparison_from_json
_.device_after
_.device_before
_.dynamic_shared_bytes
_.input_sets
_.l2_flush_bytes
_.longest_call_ms
_.physics
_.required_speedup
_.ridge_flop_per_byte
_.student_median_ms
_.verified_calls
_.warmup_calls
